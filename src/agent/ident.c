#include "agent/ident.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/httpc.h"
#include "base/jv.h"
#include "base/mem.h"
#include "base/util.h"
#include "base/version.h"
#include "gpu/gpu.h"
#include "proto/wire.h"

static const struct jv_field ident_fields[] = {
        {"node_id", JV_INT, 1, 1, INT64_MAX},
        {"secret", JV_STRING, 1, 1, 255},
        {"name", JV_STRING, 0, 0, 127},
        {NULL, 0, 0, 0, 0},
};

/* Copies the checked fields of o into out. */
static void ident_from(const json_t *o, struct ident *out)
{
	out->node_id = jv_int(o, "node_id", 0);
	snprintf(out->secret, sizeof(out->secret), "%s", jv_str(o, "secret", ""));
	snprintf(out->name, sizeof(out->name), "%s", jv_str(o, "name", ""));
}

int ident_load(const char *path, struct ident *out, char *err, size_t errlen)
{
	struct buf b;
	buf_init(&b);
	json_t *o = NULL;
	char why[256];
	int rc = read_file(path, 64 * 1024, &b);
	if (rc == -ENOENT)
		goto out;
	if (rc) {
		snprintf(err, errlen, "%s: %s", path, strerror(-rc));
		goto out;
	}
	rc = jv_parse_object(b.data, b.len, &o, why, sizeof(why));
	if (rc == 0)
		rc = jv_check(o, ident_fields, why, sizeof(why));
	if (rc) {
		snprintf(err, errlen, "%s: %s", path, why);
		goto out;
	}
	ident_from(o, out);
out:
	json_decref(o);
	buf_cleanup(&b);
	return rc;
}

int ident_save(const char *path, const struct ident *id)
{
	json_t *o = json_pack("{s:I,s:s,s:s}", "node_id", (json_int_t)id->node_id, "secret",
	                      id->secret, "name", id->name);
	char *text = jv_dump(o);
	json_decref(o);
	int rc = write_file_atomic(path, text, strlen(text), 0600);
	free(text);
	return rc;
}

/* The GPU groups as masks: what the server's scheduler packs tasks into. */
static json_t *groups_json(const struct gpu_backend *gpus)
{
	uint64_t g[GPU_MAX];
	int n = gpu_groups(gpus, g, GPU_MAX);
	json_t *a = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_integer((json_int_t)g[i]));
	return a;
}

/* GPUs behind one PCIe switch (links PIX or PXB), as masks: the finer
 * groups the scheduler uses within an NVLink group. */
static json_t *near_json(const struct gpu_backend *gpus)
{
	int n = gpu_count(gpus);
	uint64_t seen = 0;
	json_t *a = json_array();
	for (int i = 0; i < n; i++) {
		if (seen & (1ull << i))
			continue;
		uint64_t m = 1ull << i;
		for (int j = i + 1; j < n; j++) {
			enum gpu_link l = gpu_pcie_between(gpus, i, j);
			if (l == GPU_LINK_PIX || l == GPU_LINK_PXB)
				m |= 1ull << j;
		}
		seen |= m;
		json_array_append_new(a, json_integer((json_int_t)m));
	}
	return a;
}

json_t *ident_facts(const char *name, const char *address, const char *agent_url,
                    const struct gpu_backend *gpus, json_t *rdma)
{
	char host[256] = "";
	if (gethostname(host, sizeof(host) - 1) != 0)
		snprintf(host, sizeof(host), "unknown");
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	json_int_t mem = pages > 0 && page > 0 ? (json_int_t)pages * page : 0;
	const struct wire_record *r = &wire_register;
	json_t *o = json_object();
	wire_set(o, r, "name", json_string(name));
	wire_set(o, r, "hostname", json_string(host));
	wire_set(o, r, "address", json_string(address));
	wire_set(o, r, "agent_url", json_string(agent_url));
	wire_set(o, r, "cpus", json_integer(cpus > 0 ? cpus : 1));
	wire_set(o, r, "memory_bytes", json_integer(mem));
	wire_set(o, r, "agent_version", json_string(ANVIL_VERSION));
	wire_set(o, r, "protocol", json_integer(WIRE_PROTOCOL));
	wire_set(o, r, "backend", json_string(gpus ? gpu_backend_name(gpus) : "none"));
	wire_set(o, r, "rdma", rdma ? rdma : json_array());
	wire_set(o, r, "gpus", gpus ? gpu_inventory_json(gpus) : json_array());
	if (gpus) {
		wire_set(o, r, "gpu_groups", groups_json(gpus));
		wire_set(o, r, "gpu_near_groups", near_json(gpus));
		wire_set(o, r, "driver_version", json_string(gpu_driver_version(gpus)));
		wire_set(o, r, "cuda_version", json_string(gpu_cuda_version(gpus)));
	}
	return o;
}

static int parse_answer(const struct buf *body, struct ident *out, char *err, size_t errlen)
{
	static const struct jv_field fields[] = {
	        {"node_id", JV_INT, 1, 1, INT64_MAX},
	        {"secret", JV_STRING, 1, 1, 255},
	        {NULL, 0, 0, 0, 0},
	};
	json_t *o = NULL;
	char why[256];
	int rc = jv_parse_object(body->data, body->len, &o, why, sizeof(why));
	if (rc == 0)
		rc = jv_check(o, fields, why, sizeof(why));
	if (rc) {
		snprintf(err, errlen, "register answer: %s", why);
		json_decref(o);
		return ERR_UPSTREAM;
	}
	ident_from(o, out);
	json_decref(o);
	return 0;
}

int ident_register(struct httpc *c, const char *server, const char *credential, const json_t *facts,
                   struct ident *out, char *err, size_t errlen)
{
	char *url = xasprintf("%s/v1/agent/register", server);
	char *body = jv_dump(facts);
	struct buf resp;
	buf_init(&resp);
	int status = 0;
	int rc = httpc_do(c, "POST", url, credential, body, strlen(body), 10000, &status, &resp);
	if (rc) {
		snprintf(err, errlen, "%s: %s", url, httpc_error(c));
	} else if (status == 401 || status == 409) {
		json_t *o = json_loadb(resp.data ? resp.data : "", resp.len, 0, NULL);
		snprintf(err, errlen, "%s: %s (%d)", url,
		         jv_str(json_object_get(o, "error"), "message",
		                status == 401 ? "the credential was refused" : "conflict"),
		         status);
		json_decref(o);
		rc = status == 401 ? ERR_AUTH : ERR_CONFLICT;
	} else if (status != 200 && status != 201) {
		snprintf(err, errlen, "%s: HTTP %d: %.300s", url, status,
		         resp.data ? resp.data : "");
		rc = status >= 400 && status < 500 ? ERR_INVALID : ERR_UPSTREAM;
	} else {
		struct ident id = {0};
		rc = parse_answer(&resp, &id, err, errlen);
		if (rc == 0) {
			snprintf(id.name, sizeof(id.name), "%s", jv_str(facts, "name", ""));
			*out = id;
		}
	}
	buf_cleanup(&resp);
	free(body);
	free(url);
	return rc;
}
