#include "proto/wire.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct wire_field sync_request_fields[] = {
        {"node_id", JV_INT, 1, 1, INT64_MAX, "the node's id, from register"},
        {"generation", JV_INT, 0, 0, INT64_MAX,
         "the generation of the last answer the agent applied"},
        {"wait_ms", JV_INT, 0, 0, 600000,
         "how long the server may hold the poll (capped at a quarter of the node timeout; half "
         "with `--rank-lease off`)"},
        {"facts", JV_OBJECT, 0, 0, 0, "the node's facts (below register), while they changed"},
        {"ranks", JV_ARRAY, 0, 0, 100000,
         "a report (below) of every rank started and not yet acknowledged"},
        {"health", JV_OBJECT, 0, 0, 0, "the GPU health report (below), while it changed"},
        {"profile_status", JV_OBJECT, 0, 0, 0,
         "how the node stands against its profile (below), while it changed"},
        {NULL, 0, 0, 0, 0, NULL},
};

static const struct wire_field report_fields[] = {
        {"attempt_id", JV_INT, 1, 1, INT64_MAX, "the attempt the rank belongs to"},
        {"rank", JV_INT, 1, 0, 1023, "the rank's number in its attempt"},
        {"state", JV_STRING, 1, 1, 31, "`starting`, `running`, `exited` or `failed_to_start`"},
        {"pid", JV_INT, 0, 0, INT32_MAX, "the rank's process, once it runs"},
        {"exit_code", JV_INT, 0, 0, 255, "with `exited`: the exit status (255 when lost)"},
        {"signal", JV_INT, 0, 0, 128, "with `exited`: the signal that killed it, else 0"},
        {"oom_kills", JV_INT, 0, 1, INT32_MAX,
         "with `exited`: how many of the rank's processes the kernel killed for passing its "
         "memory limit (its memory cgroup's `oom_kill`); left out when none"},
        {"error", JV_STRING, 0, 0, 4096,
         "with `failed_to_start`, or `exited` when the agent lost the rank: why"},
        {"checkpoint_ms", JV_INT, 0, 0, INT64_MAX,
         "wall-clock time of the rank's newest checkpoint"},
        {"checkpoint", JV_OBJECT, 0, 0, 0,
         "rank 0 of a checkpointing job: the newest checkpoint its agent uploaded (below)"},
        {"hung_ms", JV_INT, 0, 1, INT64_MAX,
         "with `running`: the rank made no progress this long, past its job's hang timeout, "
         "and its stacks are in its stderr log"},
        {"reason", JV_STRING, 0, 0, 255,
         "with `exited`, in a job with a head: why its launcher ended it (which process "
         "ended first)"},
        {"gpu_idle_ms", JV_INT, 0, 0, INT64_MAX,
         "with `running`, a session's rank: how long every GPU of the rank has been idle "
         "(under 5% utilization), 0 while one is busy; left out while the agent cannot tell"},
        {NULL, 0, 0, 0, 0, NULL},
};

static const struct wire_field sync_answer_fields[] = {
        {"generation", JV_INT, 1, INT64_MIN, INT64_MAX,
         "the node's generation: changes whenever its desired set does"},
        {"node_timeout_ms", JV_INT, 0, 0, INT64_MAX,
         "how long the node may be silent before it is marked lost"},
        {"lease_ms", JV_INT, 0, 0, INT64_MAX,
         "the ranks' lease: from when this request was sent, how long the node's ranks may "
         "run without another answer (self-fencing); absent or 0: no lease"},
        {"ranks", JV_ARRAY, 1, 0, 0,
         "a desired entry (below) for every rank the node should run now"},
        {"profile", JV_OBJECT, 0, 0, 0,
         "the profile (below) the node must converge to; absent: none (docs/fleet.md)"},
        {"envs", JV_OBJECT, 0, 0, 0,
         "to an agent of protocol 2 or later: the environments the entries name in `env_base`, "
         "each once, by key"},
        {NULL, 0, 0, 0, 0, NULL},
};

/* The fleet's node profiles (docs/fleet.md): what the server asks a node
 * to converge to, and what the agent says of it. */
static const struct wire_field profile_fields[] = {
        {"hash", JV_STRING, 1, 1, 64, "the SHA-256 (hex) of `spec` as canonical JSON"},
        {"name", JV_STRING, 1, 1, 63, "the profile's name in the fleet spec"},
        {"spec", JV_OBJECT, 1, 0, 0,
         "the compiled profile (`anvil fleet check --json`'s `profiles.NAME`)"},
        {NULL, 0, 0, 0, 0, NULL},
};

static const struct wire_field profile_status_fields[] = {
        {"hash", JV_STRING, 1, 1, 64, "the hash of the profile these steps ran against"},
        {"state", JV_STRING, 1, 1, 16,
         "`converging`, `converged` (every step ok), `failed` (a step failed) or `drifted` (a "
         "check found the node no longer matches)"},
        {"steps", JV_ARRAY, 1, 0, 256, "a step result (below) for each step, in order"},
        {"time_ms", JV_INT, 1, 0, INT64_MAX, "when the steps last ran (wall clock, ms)"},
        {NULL, 0, 0, 0, 0, NULL},
};

static const struct wire_field profile_step_fields[] = {
        {"name", JV_STRING, 1, 1, 200,
         "what the step ensures (`mount /mnt/nvme`, `sysctl vm.swappiness`)"},
        {"status", JV_STRING, 1, 1, 16,
         "`ok` (already so), `changed` (its action made it so), `failed` or `skipped`"},
        {"detail", JV_STRING, 0, 0, 4096,
         "what it found or did, or why it failed (the output kept)"},
        {NULL, 0, 0, 0, 0, NULL},
};

static const struct wire_field desired_fields[] = {
        {"attempt_id", JV_INT, 1, 1, INT64_MAX, "the attempt; attempt ids are never reused"},
        {"job_id", JV_INT, 0, 0, INT64_MAX, "the attempt's job"},
        {"rank", JV_INT, 1, 0, 1 << 20, "the rank's number in its attempt"},
        {"command", JV_STRINGS, 1, 1, 1024, "the program and its arguments"},
        {"cwd", JV_STRING, 0, 0, 4096, "the work directory; `null`: the agent's"},
        {"gpus", JV_ARRAY, 0, 0, 1024, "the indexes of the node's GPUs the rank gets"},
        {"grace_ms", JV_INT, 0, 0, 600000, "from SIGTERM to SIGKILL when it is stopped"},
        {"env", JV_STRING_MAP, 0, 0, 4096, "the rank's environment (below)"},
        {"env_base", JV_STRING, 0, 1, 23,
         "the key in the answer's `envs` of the job's environment, which `env` adds to and "
         "overrides; absent: `env` is the whole environment"},
        {"cpu_millis", JV_INT, 0, 1, 1LL << 40,
         "CPU time in thousandths of a CPU, when the job set `cpus`"},
        {"memory_bytes", JV_INT, 0, 1, INT64_MAX,
         "the memory limit, when the job set `memory_bytes`"},
        {"head_addr", JV_STRING, 0, 1, 300,
         "in a job with a head (below): its `host:port`; the agent runs the rank under its "
         "launcher"},
        {"head", JV_STRING, 0, 1, WIRE_MAX_SHELL,
         "rank 0 of a job with a head: the head's command"},
        {"worker", JV_STRING, 0, 1, WIRE_MAX_SHELL, "in a job with a head: the worker's command"},
        {"head_timeout_ms", JV_INT, 0, 1000, WIRE_MAX_HEAD_TIMEOUT_MS,
         "in a job with a head: how long to wait for it to answer"},
        {"session", JV_BOOL, 0, 0, 0,
         "an interactive session: the agent runs the command under a session holder"},
        {"mpi", JV_BOOL, 0, 0, 0,
         "an MPI job: rank 0 runs `mpirun` over the gang (`anvil _mpirun`), the other ranks "
         "a placeholder that `mpirun`'s daemons are started in (`anvil _mpiwait`)"},
        {"mpi_hosts", JV_STRINGS, 0, 1, 1024,
         "rank 0 of an MPI job: every rank's node name, in rank order: the hostfile's lines"},
        {"task", JV_BOOL, 0, 0, 0,
         "a workflow task's rank: the agent runs the command under `anvil _task`, which "
         "reads `ANVIL_TASK` (docs/workflows.md)"},
        {"notice", JV_OBJECT, 0, 0, 0,
         "a session's rank: a notice (below) for its terminal, delivered once by its `id`"},
        {"as_root", JV_BOOL, 0, 0, 0,
         "its queue runs its ranks as root (`run_as_root`); absent: as the agent's rank "
         "account"},
        {"hang_timeout_ms", JV_INT, 0, 1000, INT64_MAX,
         "the job's hang timeout (agent/hang.h); absent: none"},
        {"restore", JV_STRING, 0, 1, 512,
         "a checkpointing job's newest uploaded checkpoint (its manifest's key), restored into "
         "`ANVIL_CHECKPOINT_DIR` before the command starts; absent: none"},
        {NULL, 0, 0, 0, 0, NULL},
};

/* A desired entry's notice: the server's words for a session's users (its
 * time limit or idle timeout is near); the agent hands them to the holder. */
static const struct wire_field notice_fields[] = {
        {"id", JV_INT, 1, 1, INT64_MAX,
         "the notice's number, growing (the wall-clock ms it was made at): the agent "
         "delivers each once"},
        {"text", JV_STRING, 1, 1, WIRE_MAX_NOTICE, "what the user reads, one line of UTF-8"},
        {NULL, 0, 0, 0, 0, NULL},
};

/* The node's facts. The agent sends them whole (agent/ident.c) in register
 * and, while they changed, in a sync; the server keeps the last (nodes.c). */
static const struct wire_field facts_fields[] = {
        {"name", JV_STRING, 0, 1, 63, "the node's name, as registered; a sync's facts repeat it"},
        {"hostname", JV_STRING, 0, 0, 255, "the node's host name"},
        {"address", JV_STRING, 0, 1, 63,
         "where the other nodes reach it: `MASTER_ADDR` when it runs rank 0"},
        {"agent_url", JV_STRING, 0, 0, 255,
         "the agent's HTTP endpoint, for log reads, node checks and fault injection"},
        {"backend", JV_STRING, 0, 0, 31, "the GPU backend: `nvml`, `sim` or `none`"},
        {"cpus", JV_INT, 0, 0, 1 << 20, "online CPUs"},
        {"memory_bytes", JV_INT, 0, 0, INT64_MAX, "physical memory"},
        {"driver_version", JV_STRING, 0, 0, 63, "the GPU driver's version"},
        {"cuda_version", JV_STRING, 0, 0, 63, "the CUDA version the driver supports"},
        {"agent_version", JV_STRING, 0, 0, 63,
         "the agent's own version (`anvil version`), which a profile's `agent` pins"},
        {"protocol", JV_INT, 0, 1, 1000,
         "the revision of this protocol the agent speaks, 1 when absent; from 2 it takes "
         "shared environments (`envs`)"},
        {"gpu_groups", JV_ARRAY, 0, 0, 64,
         "bit masks of GPU indexes that share NVLink, else a PCIe switch, else a NUMA node: "
         "what the scheduler packs ranks into"},
        {"gpu_near_groups", JV_ARRAY, 0, 0, 64,
         "bit masks of GPU indexes behind one PCIe switch: finer groups within an NVLink group"},
        {"rdma", JV_ARRAY, 0, 0, 64, "an RDMA port (below) for each port of the node"},
        {"gpus", JV_ARRAY, 0, 0, 64, "a GPU entry (below) for each GPU"},
        {NULL, 0, 0, 0, 0, NULL},
};

/* The rest of the body are the facts (the record's base). */
static const struct wire_field register_fields[] = {
        {"name", JV_STRING, 1, 1, 63, "the node's name, which identifies it in the cluster"},
        {NULL, 0, 0, 0, 0, NULL},
};

/* gpu/gpu.c builds it; a value the GPU or driver cannot tell is left out. */
static const struct wire_field gpu_fields[] = {
        {"index", JV_INT, 1, 0, 63, "the GPU's index on the node"},
        {"uuid", JV_STRING, 1, 0, 95, "its UUID (`GPU-...`)"},
        {"model", JV_STRING, 0, 0, 95,
         "the model, as agents from before the GPU inventory sent it; else `name` is read"},
        {"name", JV_STRING, 0, 0, 95, "the model as the driver names it (`NVIDIA H200`)"},
        {"memory_bytes", JV_INT, 0, 0, INT64_MAX, "its memory"},
        {"pci_bus_id", JV_STRING, 0, 0, 63, "its PCI address (`00000000:18:00.0`)"},
        {"minor", JV_INT, 0, -1, 1 << 20, "N of `/dev/nvidiaN`"},
        {"numa_node", JV_INT, 0, -1, 1 << 16, "the NUMA node of the GPU's PCIe root"},
        {"cpu_affinity", JV_STRING, 0, 0, 255, "the CPUs close to it, a cpulist (`0-55,112-167`)"},
        {"mig_mode", JV_INT, 0, -1, 1, "MIG: 1 enabled, 0 disabled"},
        {"persistence_mode", JV_INT, 0, -1, 1, "persistence mode: 1 enabled, 0 disabled"},
        {"nvlinks", JV_INT, 0, -1, 64, "NVLink links in state active"},
        {"links", JV_STRINGS, 0, 0, 64,
         "the link to every GPU by index: `SELF`, `NV` (NVLink), `PIX` (one PCIe switch), "
         "`PXB` (several), `PHB` (one host bridge), `NODE` (one NUMA node), `SYS` (across "
         "NUMA nodes)"},
        {NULL, 0, 0, 0, 0, NULL},
};

/* gpu/rdma.c builds it; the bounds are its buffers' sizes. */
static const struct wire_field rdma_port_fields[] = {
        {"dev", JV_STRING, 1, 1, 63, "the device (`mlx5_0`)"},
        {"port", JV_INT, 1, 1, 255, "the port's number on the device"},
        {"state", JV_STRING, 0, 0, 15,
         "`ACTIVE`, `DOWN`, `INIT` or `ARMED`; `\"\"` when the port could not be read"},
        {"phys_state", JV_STRING, 0, 0, 23, "`LinkUp`, `Disabled`, `Polling`, ..."},
        {"rate", JV_STRING, 0, 0, 47, "`400 Gb/sec (4X NDR)`; `\"\"` when not told"},
        {"link_layer", JV_STRING, 0, 0, 15, "`InfiniBand` or `Ethernet` (RoCE)"},
        {"netdev", JV_STRING, 0, 0, 31, "its network interface (`ib0`); `\"\"` when none"},
        {"numa_node", JV_INT, 0, -1, 4095, "the NUMA node of the device; -1 when unknown"},
        {"pci_bus_id", JV_STRING, 0, 0, 31, "the device's PCI address (`0000:19:00.0`)"},
        {"gpus_near", JV_ARRAY, 0, 0, 64,
         "the indexes of the GPUs near it: below the same PCIe bridge, else on the same NUMA "
         "node"},
        {"near_by", JV_STRING, 0, 0, 15, "which made them near: `switch`, `numa` or `none`"},
        {"gpus_numa", JV_ARRAY, 0, 0, 64, "the indexes of every GPU on its NUMA node"},
        {"error", JV_STRING, 0, 0, 159,
         "why the port could not be read; such a port is used for nothing"},
        {NULL, 0, 0, 0, 0, NULL},
};

/* agent/gpuwatch.c builds it; nodes.c applies it. */
static const struct wire_field health_fields[] = {
        {"gpus", JV_ARRAY, 0, 0, 64, "a GPU state (below) for every GPU"},
        {"node", JV_OBJECT, 0, 0, 0, "the node fault (below), or `null` when there is none"},
        {"findings", JV_ARRAY, 0, 0, 256, "the newest findings (below), oldest first"},
        {NULL, 0, 0, 0, 0, NULL},
};

static const struct wire_field gpu_health_fields[] = {
        {"index", JV_INT, 1, 0, 63, "the GPU's index"},
        {"state", JV_STRING, 1, 1, 31,
         "`healthy`, `quarantined` (waiting for a reset and a clean check) or `lost`"},
        {"code", JV_STRING, 0, 0, 31, "while not healthy: the fault's code (`xid-48`)"},
        {"reason", JV_STRING, 0, 0, 255, "while not healthy: why, one sentence"},
        {"since_ms", JV_INT, 0, 0, INT64_MAX, "while not healthy: since when (wall clock)"},
        {NULL, 0, 0, 0, 0, NULL},
};

static const struct wire_field node_fault_fields[] = {
        {"code", JV_STRING, 0, 0, 31, "the fault's code (`gpu-lost`)"},
        {"reason", JV_STRING, 1, 1, 255, "why the node is out of service, one sentence"},
        {"since_ms", JV_INT, 0, 0, INT64_MAX, "since when (wall clock)"},
        {NULL, 0, 0, 0, 0, NULL},
};

/* The server also checks that scope is one of its four words. */
static const struct wire_field finding_fields[] = {
        {"seq", JV_INT, 1, 1, INT64_MAX,
         "its number, growing across agent restarts: the server applies each finding once"},
        {"gpu", JV_INT, 0, -1, 63, "the GPU; -1 when the driver could not say"},
        {"scope", JV_STRING, 1, 1, 15,
         "the smallest scope that fixes it: `warning`, `job`, `gpu` or `node` ([gpu.md](gpu.md))"},
        {"code", JV_STRING, 0, 0, 31, "what was found (`xid-48`, `thermal`, ...)"},
        {"reason", JV_STRING, 0, 0, 255, "one sentence naming the GPU, the fault and the action"},
        {"wall_ms", JV_INT, 0, 0, INT64_MAX, "when it was found (wall clock)"},
        {"counted", JV_BOOL, 0, 0, 0,
         "false for evidence of a fault already acted on (the uncorrectable-error count that "
         "follows an XID 48): recorded as an event, not counted; default true"},
        {NULL, 0, 0, 0, 0, NULL},
};

/* The defaults are the server's (server/jobs.c); what only the server can
 * check (the queue exists, the command's program and the selectors are not
 * empty, env names, exported names are in env) is said in the meaning. */
static const struct wire_field submit_fields[] = {
        {"command", JV_STRINGS, 1, 1, 1024, "the program and its arguments; the program not empty"},
        {"gpus", JV_INT, 0, 0, WIRE_MAX_GPUS,
         "whole GPUs per node; 0: a CPU-only job, which holds no GPU and may not set "
         "`gpu_type` or `min_gpu_memory_bytes` (docs/scheduling.md); default 1"},
        {"nodes", JV_INT, 0, 1, 1024, "nodes, one rank on each; default 1"},
        {"queue", JV_STRING, 0, 1, 63, "an existing queue; default `default`"},
        {"team", JV_STRING, 0, 1, 63,
         "whose quota and fair share it counts against; default `default`"},
        {"priority", JV_INT, 0, -1000, 1000, "priority within the queue; default 0"},
        {"name", JV_STRING, 0, 0, 128, "a name to show in listings; default `\"\"`"},
        {"env", JV_STRING_MAP, 0, 0, 1024,
         "the ranks' environment (below): names not empty and without `=`"},
        {"exported", JV_STRINGS, 0, 0, 1024,
         "names in `env` that the client exported from its own environment (below)"},
        {"cwd", JV_STRING, 0, 1, 4096,
         "the working directory on the nodes, an absolute path; default: the attempt's "
         "output directory"},
        {"grace_ms", JV_INT, 0, 0, 600000, "SIGTERM-to-SIGKILL grace when stopping; default 10000"},
        {"time_limit_ms", JV_INT, 0, 1000, 366LL * 24 * 3600 * 1000,
         "the attempt is stopped when it is reached; lets the scheduler backfill; default: "
         "the queue's"},
        {"gpu_type", JV_STRING, 0, 1, 95,
         "a GPU model, matched case-insensitively on the model's last word (`h200` matches "
         "`NVIDIA H200`); default: any"},
        {"min_gpu_memory_bytes", JV_INT, 0, 0, 1LL << 50,
         "memory every assigned GPU must have; default 0"},
        {"pool", JV_STRING, 0, 1, 63, "only nodes in this pool; default: any"},
        {"selectors", JV_STRING_MAP, 0, 0, 4,
         "labels every node must carry (`{\"disk\": \"nvme\"}`): keys not empty and without "
         "`=`, values not empty"},
        {"checkpointing", JV_BOOL, 0, 0, 0,
         "the job checkpoints: preferred as a preemption victim (it loses less); default false"},
        {"cpus", JV_NUMBER, 0, 10, 1024 * 1000, /* CFS gives no less than 1 ms per 100 ms */
         "CPU time per rank, in CPUs (`0.5`, `4`), kept to the thousandth; a CFS quota "
         "(below); default: no limit"},
        {"memory_bytes", JV_INT, 0, 4LL << 20, 64LL << 40,
         "memory per rank; past it the kernel reclaims, then OOM-kills a process of the rank "
         "(SIGKILL: exit code 137 when it is the command); default: no limit"},
        {"after", JV_ARRAY, 0, 0, 64,
         "jobs to wait for, as `sbatch --dependency`: `[{\"job\": ID, \"when\": \"ok\"}]`, "
         "`when` `ok` (the job succeeded), `failed` (it ended otherwise) or `any`; default `ok`"},
        {"array", JV_OBJECT, 0, 0, 0,
         "submit one job per index, as `sbatch --array`: `{\"indices\": [0, 1, ...], "
         "\"max_running\": N}` (1 to 10000 distinct indices 0 to 999999; N 0: no limit)"},
        {"head", JV_STRING, 0, 1, WIRE_MAX_SHELL,
         "a command for `/bin/sh -c` run on rank 0 before the job's command (below); "
         "default: none"},
        {"worker", JV_STRING, 0, 1, WIRE_MAX_SHELL,
         "with `head`: a command for `/bin/sh -c` run on every rank once the head answers; "
         "default: none"},
        {"head_timeout_ms", JV_INT, 0, 1000, WIRE_MAX_HEAD_TIMEOUT_MS,
         "with `head`: how long the ranks wait for it to answer; default 300000"},
        {"session", JV_BOOL, 0, 0, 0,
         "an interactive session (`anvil shell`): the command runs in a terminal that "
         "`attach` streams reach; default false"},
        {"mpi", JV_BOOL, 0, 0, 0,
         "an MPI program: rank 0 runs `mpirun` over every rank's node with the command, "
         "anvil starting its daemons (below); not with `head` or `session`; default false"},
        {"requeue", JV_BOOL, 0, 0, 0,
         "requeued as a new attempt when a rank is lost with its node; default: when it "
         "checkpoints (`checkpointing`); never for a session"},
        {"max_restarts", JV_INT, 0, 0, 1000,
         "how many times it is requeued after a lost node or a hang before it ends; default 3"},
        {"hang_timeout_ms", JV_INT, 0, 1000, 366LL * 24 * 3600 * 1000,
         "a rank that makes no progress this long (its log, its heartbeat file, its GPUs) is "
         "hung: its stacks are recorded and the job is requeued as after a lost node; default: "
         "never"},
        {NULL, 0, 0, 0, 0, NULL},
};

/* The first frame of an exec stream (proto/stream.h, STREAM_EXEC): what to
 * run in the rank. The exec helper on the node validates it. */
static const struct wire_field exec_fields[] = {
        {"command", JV_STRINGS, 1, 1, 1024, "the program and its arguments; the program not empty"},
        {"tty", JV_BOOL, 0, 0, 0,
         "run it in a terminal (stdout and stderr are one); default false"},
        {"stdin", JV_BOOL, 0, 0, 0,
         "the client sends stdin frames; without, stdin is /dev/null; default false"},
        {"rows", JV_INT, 0, 1, 65535, "with `tty`: the terminal's rows; default 24"},
        {"cols", JV_INT, 0, 1, 65535, "with `tty`: the terminal's columns; default 80"},
        {"term", JV_STRING, 0, 1, 128, "with `tty`: TERM for the command; default the rank's"},
        {NULL, 0, 0, 0, 0, NULL},
};

const struct wire_record wire_sync_request = {"sync_request", sync_request_fields, NULL};
const struct wire_record wire_report = {"report", report_fields, NULL};
const struct wire_record wire_sync_answer = {"sync_answer", sync_answer_fields, NULL};
const struct wire_record wire_desired = {"desired", desired_fields, NULL};
const struct wire_record wire_notice = {"notice", notice_fields, NULL};
const struct wire_record wire_facts = {"facts", facts_fields, NULL};
const struct wire_record wire_register = {"register", register_fields, &wire_facts};
const struct wire_record wire_gpu = {"gpu", gpu_fields, NULL};
const struct wire_record wire_rdma_port = {"rdma_port", rdma_port_fields, NULL};
const struct wire_record wire_health = {"health", health_fields, NULL};
const struct wire_record wire_gpu_health = {"gpu_health", gpu_health_fields, NULL};
const struct wire_record wire_node_fault = {"node_fault", node_fault_fields, NULL};
const struct wire_record wire_finding = {"finding", finding_fields, NULL};
const struct wire_record wire_submit = {"submit", submit_fields, NULL};
const struct wire_record wire_exec = {"exec", exec_fields, NULL};
const struct wire_record wire_profile = {"profile", profile_fields, NULL};
const struct wire_record wire_profile_status = {"profile_status", profile_status_fields, NULL};
const struct wire_record wire_profile_step = {"profile_step", profile_step_fields, NULL};

const struct wire_record *const wire_records[] = {
        &wire_sync_request,
        &wire_report,
        &wire_sync_answer,
        &wire_desired,
        &wire_notice,
        &wire_register,
        &wire_facts,
        &wire_gpu,
        &wire_rdma_port,
        &wire_health,
        &wire_gpu_health,
        &wire_node_fault,
        &wire_finding,
        &wire_submit,
        &wire_exec,
        &wire_profile,
        &wire_profile_status,
        &wire_profile_step,
        NULL,
};

const char *const wire_rank_env[] = {
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "MASTER_ADDR",
        "MASTER_PORT",
        "NNODES",
        "NODE_RANK",
        "NPROC_PER_NODE",
        "WORLD_SIZE",
        "ANVIL_JOB_ID",
        "ANVIL_ATTEMPT",
        "ANVIL_ATTEMPT_ID",
        "ANVIL_NODE",
        "ANVIL_JOB_NAME",
        "ANVIL_CHECKPOINTING",
        "ANVIL_HEAD_ADDR",
        "ANVIL_HEAD_PORT",
        "ANVIL_ARRAY_ID",
        "ANVIL_ARRAY_INDEX",
        "ANVIL_EXEC_TOKEN",
        "ANVIL_TASK",
        NULL,
};

static void set_num(json_t *env, const char *k, long long v)
{
	char tmp[32];
	snprintf(tmp, sizeof(tmp), "%lld", v);
	json_object_set_new(env, k, json_string(tmp));
}

void wire_rank_env_set(json_t *env, const struct wire_rank_vars *v)
{
	json_object_set_new(env, "CUDA_VISIBLE_DEVICES", json_string(v->cuda));
	json_object_set_new(env, "NVIDIA_VISIBLE_DEVICES",
	                    json_string(v->uuids ? v->uuids : "void"));
	json_object_set_new(env, "MASTER_ADDR", json_string(v->master_addr));
	set_num(env, "MASTER_PORT", v->master_port);
	set_num(env, "NNODES", v->nnodes);
	set_num(env, "NODE_RANK", v->node_rank);
	set_num(env, "NPROC_PER_NODE", v->nproc);
	set_num(env, "WORLD_SIZE", (long long)v->nnodes * v->nproc);
	set_num(env, "ANVIL_JOB_ID", v->job_id);
	set_num(env, "ANVIL_ATTEMPT", v->attempt);
	set_num(env, "ANVIL_ATTEMPT_ID", v->attempt_id);
	json_object_set_new(env, "ANVIL_NODE", json_string(v->node));
	json_object_set_new(env, "ANVIL_JOB_NAME", json_string(v->job_name));
	if (v->array_id) {
		set_num(env, "ANVIL_ARRAY_ID", v->array_id);
		set_num(env, "ANVIL_ARRAY_INDEX", v->array_index);
	}
	if (v->checkpointing) /* the agent gives it ANVIL_CHECKPOINT_DIR */
		json_object_set_new(env, "ANVIL_CHECKPOINTING", json_string("1"));
	if (v->head_addr) {
		json_object_set_new(env, "ANVIL_HEAD_ADDR", json_string(v->head_addr));
		set_num(env, "ANVIL_HEAD_PORT", v->head_port);
	}
}

static const struct wire_field *own_field(const struct wire_record *r, const char *name)
{
	for (const struct wire_field *f = r->fields; f->name; f++)
		if (strcmp(f->name, name) == 0)
			return f;
	return NULL;
}

const struct wire_field *wire_field(const struct wire_record *r, const char *name)
{
	for (; r; r = r->base) {
		const struct wire_field *f = own_field(r, name);
		if (f)
			return f;
	}
	return NULL;
}

/* Every field of r, its own first, then its base's that it does not
 * replace, into out[WIRE_MAX_FIELDS]; how many. */
static size_t all_fields(const struct wire_record *r, const struct wire_field **out)
{
	size_t n = 0;
	for (const struct wire_record *b = r; b; b = b->base) {
		for (const struct wire_field *f = b->fields; f->name; f++) {
			if (wire_field(r, f->name) != f)
				continue; /* replaced by a field nearer r */
			assert(n < WIRE_MAX_FIELDS);
			out[n++] = f;
		}
	}
	return n;
}

static int has_type(const json_t *v, enum jv_type t)
{
	switch (t) {
	case JV_STRING: return json_is_string(v);
	case JV_INT: return json_is_integer(v);
	case JV_BOOL: return json_is_boolean(v);
	case JV_STRINGS:
	case JV_ARRAY: return json_is_array(v);
	case JV_OBJECT:
	case JV_STRING_MAP: return json_is_object(v);
	case JV_NUMBER: return json_is_number(v);
	}
	return 0;
}

void wire_set(json_t *o, const struct wire_record *r, const char *name, json_t *v)
{
	const struct wire_field *f = wire_field(r, name);
	/* A programming error, caught by every test that builds the record. */
	if (!f || !v || !(has_type(v, f->type) || (json_is_null(v) && !f->required))) {
		fprintf(stderr, "anvil: %s record: field '%s' is %s\n", r->name, name,
		        f ? "of the wrong type" : "not in its table");
		abort();
	}
	json_object_set_new(o, name, v);
}

/* r's table as jv_check() takes it, in fields[WIRE_MAX_FIELDS + 1]. */
static void jv_fields(const struct wire_record *r, struct jv_field *fields)
{
	const struct wire_field *all[WIRE_MAX_FIELDS];
	size_t n = all_fields(r, all);
	for (size_t i = 0; i < n; i++)
		fields[i] = (struct jv_field){all[i]->name, all[i]->type, all[i]->required,
		                              all[i]->min, all[i]->max};
	fields[n] = (struct jv_field){NULL, 0, 0, 0, 0};
}

int wire_check(const json_t *o, const struct wire_record *r, char *err, size_t errlen)
{
	struct jv_field fields[WIRE_MAX_FIELDS + 1];
	jv_fields(r, fields);
	return jv_check(o, fields, err, errlen);
}

int wire_check_each(const json_t *o, const char *key, const struct wire_record *r, char *err,
                    size_t errlen)
{
	struct jv_field fields[WIRE_MAX_FIELDS + 1];
	jv_fields(r, fields);
	return jv_check_each(o, key, fields, err, errlen);
}

json_t *wire_known(const json_t *o, const struct wire_record *r)
{
	const struct wire_field *all[WIRE_MAX_FIELDS];
	size_t n = all_fields(r, all);
	json_t *out = json_object();
	for (size_t i = 0; json_is_object(o) && i < n; i++) {
		json_t *v = json_object_get(o, all[i]->name);
		if (v)
			json_object_set(out, all[i]->name, v);
	}
	return out;
}
