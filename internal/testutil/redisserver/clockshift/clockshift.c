// clockshift: an LD_PRELOAD library that shifts a process's wall clock (CLOCK_REALTIME and the
// calls built on it: gettimeofday, time) by an offset another process can change at any time, as
// an NTP step on that host would. The offset is a signed 64-bit count of nanoseconds in the file
// named by CLOCKSHIFT_FILE, mapped shared, so a store into the file's page takes effect at the
// next clock read. Monotonic clocks are left alone: a step moves only the wall clock.
//
// redisserver (WithClockShift) builds it with the C compiler and preloads it into redis-server.
// libfaketime cannot serve: Debian's redis-server allocates with jemalloc, which reads the clock
// while it initialises, before libfaketime has, and the process hangs. So nothing here allocates,
// and the real clock is read by system call, never through the symbol being replaced.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *shift;
static int tried;

static int64_t offset_ns(void) {
	if (!tried) {
		tried = 1;
		const char *path = getenv("CLOCKSHIFT_FILE");
		int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
		if (fd >= 0) {
			void *p = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
			close(fd);
			if (p != MAP_FAILED) shift = p;
		}
	}
	return shift ? *shift : 0;
}

static int real_clock_gettime(clockid_t id, struct timespec *ts) {
	return (int)syscall(SYS_clock_gettime, id, ts);
}

static void add(struct timespec *ts, int64_t ns) {
	int64_t t = (int64_t)ts->tv_nsec + ns % 1000000000;
	ts->tv_sec += ns / 1000000000 + t / 1000000000;
	t %= 1000000000;
	if (t < 0) {
		t += 1000000000;
		ts->tv_sec--;
	}
	ts->tv_nsec = t;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	int rc = real_clock_gettime(id, ts);
	if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) add(ts, offset_ns());
	return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	(void)tz;
	struct timespec ts;
	int rc = clock_gettime(CLOCK_REALTIME, &ts);
	if (rc == 0) {
		tv->tv_sec = ts.tv_sec;
		tv->tv_usec = ts.tv_nsec / 1000;
	}
	return rc;
}

time_t time(time_t *out) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
	if (out) *out = ts.tv_sec;
	return ts.tv_sec;
}
