/* stamp.c - the benchmark's trivial job: its first action reads the wall clock, then it
 * reports "KEY SECONDS.NANOSECONDS" to the benchmark's listener on 127.0.0.1:PORT and exits 0.
 *
 *   stamp PORT [ANYTHING...] KEY
 *
 * PORT is the first argument and KEY the last, so the same binary works as a direct command
 * (anvil: stamp PORT KEY) and as a batch script's interpreter (Slurm: a script whose first line
 * is "#!/path/stamp PORT" makes the kernel run stamp PORT SCRIPT KEY). A Slurm array task
 * appends "-$SLURM_ARRAY_TASK_ID" to KEY. Built static by cluster_bench.py so that the job is
 * one exec with no dynamic loading and no shell start-up: the figure is the scheduler's. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (argc < 3)
		return 2;
	const char *task = getenv("SLURM_ARRAY_TASK_ID");
	char line[512];
	int n = snprintf(line, sizeof(line), "%s%s%s %lld.%09ld\n", argv[argc - 1],
	                 task ? "-" : "", task ? task : "", (long long)ts.tv_sec, ts.tv_nsec);
	if (n < 0 || (size_t)n >= sizeof(line))
		return 3;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return 4;
	if (write(fd, line, (size_t)n) != n)
		return 5;
	close(fd);
	return 0;
}
