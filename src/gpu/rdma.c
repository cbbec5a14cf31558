/* rdma.c - RDMA ports from sysfs, GPU nearness and NCCL variables. */
#include "gpu/rdma.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/util.h"
#include "proto/wire.h"

const char *rdma_near_name(enum rdma_near n)
{
	switch (n) {
	case RDMA_NEAR_NONE: return "none";
	case RDMA_NEAR_SWITCH: return "switch";
	case RDMA_NEAR_NUMA: return "numa";
	}
	return "none";
}

/* Formats a path: 0, or -ENAMETOOLONG rather than a cut path. */
__attribute__((format(printf, 3, 4))) static int pathf(char *out, size_t outlen, const char *fmt,
                                                       ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(out, outlen, fmt, ap);
	va_end(ap);
	return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

/* Copies src into out (outlen > 0), cut to fit. */
static void copy(char *out, size_t outlen, const char *src)
{
	size_t n = strnlen(src, outlen - 1);
	memcpy(out, src, n);
	out[n] = '\0';
}

/* Reads a small sysfs attribute, trailing whitespace removed. 0, a
 * negative errno, or -EFBIG when it does not fit out. */
static int read_attr(const char *path, char *out, size_t outlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t r;
	do {
		r = read(fd, out, outlen);
	} while (r < 0 && errno == EINTR);
	int rc = r < 0 ? -errno : 0;
	close(fd);
	if (rc)
		return rc;
	if ((size_t)r >= outlen)
		return -EFBIG;
	out[r] = '\0';
	while (r > 0 && isspace((unsigned char)out[r - 1]))
		out[--r] = '\0';
	return 0;
}

/* "4: ACTIVE" -> "ACTIVE". 0 or ERR_INVALID. */
static int parse_numbered(const char *s, char *name, size_t namelen)
{
	const char *p = s;
	if (!isdigit((unsigned char)*p))
		return ERR_INVALID;
	while (isdigit((unsigned char)*p))
		p++;
	if (*p++ != ':')
		return ERR_INVALID;
	while (*p == ' ')
		p++;
	size_t n = strlen(p);
	if (n == 0 || n >= namelen)
		return ERR_INVALID;
	for (size_t i = 0; i < n; i++) {
		if (!isalnum((unsigned char)p[i]) && p[i] != '_')
			return ERR_INVALID;
	}
	memcpy(name, p, n + 1);
	return 0;
}

/* A sysfs device directory, reduced to its PCI path from the root complex:
 * "pci0000:17/0000:17:01.0/0000:18:00.0". "" when link does not resolve
 * to a PCI device. */
static void pci_path(const char *link, char *out, size_t outlen)
{
	out[0] = '\0';
	char *abs = realpath(link, NULL);
	if (!abs)
		return;
	const char *p = strstr(abs, "/devices/pci");
	if (p && isxdigit((unsigned char)p[12]) && strlen(p) < outlen)
		copy(out, outlen, p + strlen("/devices/"));
	free(abs);
}

/* How many bridges below the root complex two PCI paths share: the common
 * leading components of their parents, less the root complex itself. */
static int shared_bridges(const char *a, const char *b)
{
	const char *ea = strrchr(a, '/'), *eb = strrchr(b, '/');
	if (!ea || !eb)
		return 0;
	int common = 0;
	for (;;) {
		const char *na = memchr(a, '/', (size_t)(ea - a) + 1);
		const char *nb = memchr(b, '/', (size_t)(eb - b) + 1);
		if (!na || !nb || na - a != nb - b || memcmp(a, b, (size_t)(na - a)) != 0)
			break;
		common++;
		if (na == ea || nb == eb)
			break;
		a = na + 1;
		b = nb + 1;
	}
	return common > 0 ? common - 1 : 0;
}

/* Parses hex digits at *s up to the character end; advances *s past it. */
static int hex_field(const char **s, char end, unsigned long max, unsigned long *out)
{
	char *stop;
	if (!isxdigit((unsigned char)**s))
		return ERR_INVALID;
	errno = 0;
	unsigned long v = strtoul(*s, &stop, 16);
	if (errno || v > max || *stop != end)
		return ERR_INVALID;
	*out = v;
	*s = end ? stop + 1 : stop;
	return 0;
}

/* "00000000:3B:00.0" (NVML) -> "0000:3b:00.0" (sysfs; a VMD domain
 * 00010000 stays "10000"). 0 or ERR_INVALID. */
static int sysfs_bus_id(const char *nvml, char *out, size_t outlen)
{
	unsigned long dom, bus, dev, fn;
	const char *s = nvml;
	if (hex_field(&s, ':', 0xffffffff, &dom) || hex_field(&s, ':', 0xff, &bus) ||
	    hex_field(&s, '.', 0x1f, &dev) || hex_field(&s, '\0', 7, &fn))
		return ERR_INVALID;
	snprintf(out, outlen, "%04lx:%02lx:%02lx.%lx", dom, bus, dev, fn);
	return 0;
}

static int numa_of(const char *devdir)
{
	char path[PATH_MAX], text[32];
	if (pathf(path, sizeof(path), "%s/numa_node", devdir) != 0 ||
	    read_attr(path, text, sizeof(text)) != 0)
		return -1;
	char *end;
	long v = strtol(text, &end, 10);
	return *end || end == text || v < 0 || v > 4095 ? -1 : (int)v;
}

/* Where each GPU sits: its PCI path and NUMA node. */
struct gpu_place {
	int index;
	int numa;
	char path[512];
};

static void place_gpus(const char *root, const struct gpu_info *gpus, int ngpus,
                       struct gpu_place *places)
{
	for (int i = 0; i < ngpus; i++) {
		struct gpu_place *p = &places[i];
		p->index = gpus[i].index;
		p->numa = gpus[i].numa_node;
		p->path[0] = '\0';
		char id[32], link[PATH_MAX];
		if (sysfs_bus_id(gpus[i].pci_bus_id, id, sizeof(id)) != 0 ||
		    pathf(link, sizeof(link), "%s/bus/pci/devices/%s", root, id) != 0)
			continue;
		pci_path(link, p->path, sizeof(p->path));
		if (p->numa < 0)
			p->numa = numa_of(link);
	}
}

static uint64_t gpu_bit(int index)
{
	return index >= 0 && index < 64 ? 1ull << index : 0;
}

/* Fills gpus_near and near_by for a device at path (may be "") on numa. */
static void mark_near(struct rdma_port *port, const char *path, const struct gpu_place *places,
                      int ngpus)
{
	uint64_t by_switch = 0, by_numa = 0;
	for (int i = 0; i < ngpus; i++) {
		if (path[0] && places[i].path[0] && shared_bridges(path, places[i].path) > 0)
			by_switch |= gpu_bit(places[i].index);
		if (port->numa_node >= 0 && places[i].numa == port->numa_node)
			by_numa |= gpu_bit(places[i].index);
	}
	port->gpus_near = by_switch ? by_switch : by_numa;
	port->gpus_numa = by_numa;
	port->near_by = by_switch ? RDMA_NEAR_SWITCH : by_numa ? RDMA_NEAR_NUMA : RDMA_NEAR_NONE;
}

static int not_dot(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

static int port_number(const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);
	return *end || end == s || v < 1 || v > 255 ? -1 : (int)v;
}

static int by_port_number(const struct dirent **a, const struct dirent **b)
{
	return port_number((*a)->d_name) - port_number((*b)->d_name);
}

/* The interface of port on the device at devdir: the only one, else the
 * one whose dev_port (0-based) matches, else the first. */
static void find_netdev(const char *devdir, int port, char *out, size_t outlen)
{
	char dir[PATH_MAX];
	out[0] = '\0';
	if (pathf(dir, sizeof(dir), "%s/net", devdir) != 0)
		return;
	struct dirent **list = NULL;
	int n = scandir(dir, &list, not_dot, alphasort);
	for (int i = 0; i < n; i++) {
		const char *name = list[i]->d_name;
		char path[PATH_MAX], text[16];
		char *end;
		int match = pathf(path, sizeof(path), "%s/%s/dev_port", dir, name) == 0 &&
		            read_attr(path, text, sizeof(text)) == 0 &&
		            strtol(text, &end, 10) == port - 1 && end != text && !*end;
		if (strlen(name) < outlen && (!out[0] || match))
			copy(out, outlen, name);
		if (match)
			break;
	}
	for (int i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

/* Reads attribute name of a port into text. 0; 1 when it is absent and
 * optional; else sets p->error and returns -1. */
static int port_attr(const char *portdir, const char *name, int required, char *text,
                     size_t textlen, struct rdma_port *p)
{
	char path[PATH_MAX];
	int rc = pathf(path, sizeof(path), "%s/%s", portdir, name);
	if (rc == 0)
		rc = read_attr(path, text, textlen);
	if (rc == 0)
		return 0;
	if (rc == -ENOENT && !required)
		return 1;
	snprintf(p->error, sizeof(p->error), "%.48s port %d: %.24s: %.60s", p->dev, p->port, name,
	         rc == -EFBIG ? "longer than expected" : strerror(-rc));
	return -1;
}

static void malformed(struct rdma_port *p, const char *name, const char *text)
{
	snprintf(p->error, sizeof(p->error), "%.48s port %d: %.24s: malformed value '%.40s'",
	         p->dev, p->port, name, text);
}

/* Reads one port's attributes: state and link_layer are required,
 * phys_state and rate optional. On a bad one, sets p->error and clears
 * the port's strings. */
static void read_port(const char *portdir, struct rdma_port *p)
{
	char text[96];
	int rc;
	if ((rc = port_attr(portdir, "state", 1, text, sizeof(text), p)) < 0)
		goto bad;
	if (parse_numbered(text, p->state, sizeof(p->state)) != 0) {
		malformed(p, "state", text);
		goto bad;
	}
	if ((rc = port_attr(portdir, "phys_state", 0, text, sizeof(text), p)) < 0)
		goto bad;
	if (rc == 0 && parse_numbered(text, p->phys_state, sizeof(p->phys_state)) != 0) {
		malformed(p, "phys_state", text);
		goto bad;
	}
	if ((rc = port_attr(portdir, "rate", 0, text, sizeof(text), p)) < 0)
		goto bad;
	if (rc == 0 && (!isdigit((unsigned char)text[0]) || strlen(text) >= sizeof(p->rate))) {
		malformed(p, "rate", text);
		goto bad;
	}
	if (rc == 0)
		copy(p->rate, sizeof(p->rate), text);
	if (port_attr(portdir, "link_layer", 1, text, sizeof(text), p) < 0)
		goto bad;
	if (!text[0] || strchr(text, ' ') || strlen(text) >= sizeof(p->link_layer)) {
		malformed(p, "link_layer", text);
		goto bad;
	}
	copy(p->link_layer, sizeof(p->link_layer), text);
	return;
bad:
	p->state[0] = p->phys_state[0] = p->rate[0] = p->link_layer[0] = '\0';
}

/* Appends the ports of device dev (under classdir) to out[*n..max). */
static void scan_device(const char *classdir, const char *dev, const struct gpu_place *places,
                        int ngpus, struct rdma_port *out, int *n, int max)
{
	char devlink[PATH_MAX], portsdir[PATH_MAX], path[512];
	if (pathf(devlink, sizeof(devlink), "%s/%s/device", classdir, dev) != 0 ||
	    pathf(portsdir, sizeof(portsdir), "%s/%s/ports", classdir, dev) != 0)
		return;
	pci_path(devlink, path, sizeof(path));
	const char *slash = strrchr(path, '/');
	int numa = numa_of(devlink);

	struct dirent **list = NULL;
	int nports = scandir(portsdir, &list, not_dot, by_port_number);
	for (int i = 0; i < nports; i++) {
		int number = port_number(list[i]->d_name);
		char portdir[PATH_MAX];
		if (number < 0 || *n >= max ||
		    pathf(portdir, sizeof(portdir), "%s/%s", portsdir, list[i]->d_name) != 0)
			continue;
		struct rdma_port *p = &out[(*n)++];
		memset(p, 0, sizeof(*p));
		copy(p->dev, sizeof(p->dev), dev);
		p->port = number;
		p->numa_node = numa;
		if (slash)
			copy(p->pci_bus_id, sizeof(p->pci_bus_id), slash + 1);
		read_port(portdir, p);
		find_netdev(devlink, number, p->netdev, sizeof(p->netdev));
		mark_near(p, path, places, ngpus);
	}
	for (int i = 0; i < nports; i++)
		free(list[i]);
	free(list);
}

int rdma_scan(const char *root, const struct gpu_info *gpus, int ngpus, struct rdma_port *out,
              int max)
{
	if (!root)
		root = "/sys";
	if (ngpus < 0 || (ngpus > 0 && !gpus) || max < 0 || (max > 0 && !out))
		return ERR_INVALID;
	if (ngpus > GPU_MAX)
		ngpus = GPU_MAX;
	char classdir[PATH_MAX];
	if (pathf(classdir, sizeof(classdir), "%s/class/infiniband", root) != 0)
		return -ENAMETOOLONG;
	struct dirent **list = NULL;
	int ndev = scandir(classdir, &list, not_dot, alphasort);
	if (ndev < 0)
		return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
	struct gpu_place places[GPU_MAX];
	place_gpus(root, gpus, ngpus, places);
	int n = 0;
	for (int i = 0; i < ndev; i++) {
		if (strlen(list[i]->d_name) < sizeof(out->dev))
			scan_device(classdir, list[i]->d_name, places, ngpus, out, &n, max);
		free(list[i]);
	}
	free(list);
	return n;
}

static int usable(const struct rdma_port *p)
{
	return !p->error[0] && strcmp(p->state, "ACTIVE") == 0 &&
	       (strcmp(p->link_layer, "InfiniBand") == 0 || strcmp(p->link_layer, "Ethernet") == 0);
}

/* How close port p is to the GPUs in mask: 2 same switch, 1 same NUMA
 * node, 0 neither; -1 when the port is unusable. */
static int closeness(const struct rdma_port *p, uint64_t mask)
{
	if (!usable(p))
		return -1;
	if (p->near_by == RDMA_NEAR_SWITCH && (p->gpus_near & mask))
		return 2;
	return (p->gpus_numa & mask) ? 1 : 0;
}

int rdma_nccl_env(const struct rdma_port *ports, int n, uint64_t gpu_mask, char *hca, size_t hcalen,
                  char *ifname, size_t ifnamelen)
{
	int best = 0;
	for (int i = 0; i < n; i++) {
		int c = closeness(&ports[i], gpu_mask);
		best = c > best ? c : best;
	}
	struct buf h, f;
	buf_init(&h);
	buf_init(&f);
	int used = 0;
	for (int i = 0; i < n; i++) {
		const struct rdma_port *p = &ports[i];
		if (closeness(p, gpu_mask) < best)
			continue;
		buf_printf(&h, "%s%s:%d", used ? "," : "=", p->dev, p->port);
		if (p->netdev[0] && !list_has(f.data ? f.data + 1 : NULL, ",", p->netdev))
			buf_printf(&f, "%s%s", f.len ? "," : "=", p->netdev);
		used++;
	}
	int rc = used;
	if (h.len >= hcalen || f.len >= ifnamelen) {
		rc = ERR_TOOBIG;
	} else {
		copy(hca, hcalen, h.data ? h.data : "");
		copy(ifname, ifnamelen, f.data ? f.data : "");
	}
	buf_cleanup(&h);
	buf_cleanup(&f);
	return rc;
}

static json_t *gpu_list(uint64_t mask)
{
	json_t *arr = json_array();
	for (int g = 0; g < 64; g++) {
		if (mask & (1ull << g))
			json_array_append_new(arr, json_integer(g));
	}
	return arr;
}

/* Sets a string field of a port's entry; *bad when s is not UTF-8. */
static void set_text(json_t *o, const char *name, const char *s, int *bad)
{
	json_t *v = json_string(s);
	if (v)
		wire_set(o, &wire_rdma_port, name, v);
	else
		*bad = 1;
}

/* Port p's entry (proto/wire.h, wire_rdma_port); NULL when a name read
 * from sysfs is not UTF-8, which JSON cannot carry. */
static json_t *port_json(const struct rdma_port *p)
{
	const struct wire_record *r = &wire_rdma_port;
	int bad = 0;
	json_t *o = json_object();
	set_text(o, "dev", p->dev, &bad);
	wire_set(o, r, "port", json_integer(p->port));
	set_text(o, "state", p->state, &bad);
	set_text(o, "phys_state", p->phys_state, &bad);
	set_text(o, "rate", p->rate, &bad);
	set_text(o, "link_layer", p->link_layer, &bad);
	set_text(o, "netdev", p->netdev, &bad);
	wire_set(o, r, "numa_node", json_integer(p->numa_node));
	set_text(o, "pci_bus_id", p->pci_bus_id, &bad);
	wire_set(o, r, "gpus_near", gpu_list(p->gpus_near));
	wire_set(o, r, "near_by", json_string(rdma_near_name(p->near_by)));
	wire_set(o, r, "gpus_numa", gpu_list(p->gpus_numa));
	if (p->error[0])
		set_text(o, "error", p->error, &bad);
	if (bad) {
		json_decref(o);
		return NULL;
	}
	return o;
}

json_t *rdma_ports_json(const struct rdma_port *ports, int n)
{
	json_t *arr = json_array();
	for (int i = 0; i < n; i++) {
		json_t *o = port_json(&ports[i]);
		if (o) /* else bytes jansson refuses (not UTF-8) in a sysfs name */
			json_array_append_new(arr, o);
	}
	return arr;
}
