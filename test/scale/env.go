//go:build scale

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/client-go/kubernetes"

	"github.com/lockedjob/lockedjob/test/scale/measure"
	"github.com/lockedjob/lockedjob/test/utils"
)

// userHZ is the unit of utime/stime in /proc/<pid>/stat: USER_HZ, 100 on every Linux ABI Go
// supports.
const userHZ = 100

// procCPU returns the CPU time (user + system) pid has used.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read cpu of pid %d: %w", pid, err)
	}
	// The command name may hold spaces and parentheses: count fields after its closing one.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("pid %d: short /proc stat line", pid)
	}
	var ticks int64
	for _, f := range fields[11:13] { // utime, stime: fields 14 and 15 of stat(5)
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("pid %d: stat field %q: %w", pid, f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// procRSS returns pid's resident set size in bytes.
func procRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read rss of pid %d: %w", pid, err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("pid %d: VmRSS %q: %w", pid, v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("pid %d: no VmRSS", pid)
}

// operator is one manager process started from the binary under test.
type operator struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error

	mu     sync.Mutex
	maxRSS int64
	stopRS chan struct{}
}

// startOperator starts the manager (or Kueue's, which logs the same controller-runtime line) and
// waits until it leads and its workers run.
func startOperator(ctx context.Context, bin string, args, env []string, logPath string) (*operator, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("operator log: %w", err)
	}
	defer func() { _ = logFile.Close() }()
	_, _ = fmt.Fprintf(logFile, "# %s %s\n", bin, strings.Join(args, " "))
	o := &operator{logPath: logPath, done: make(chan struct{}), stopRS: make(chan struct{})}
	o.cmd = exec.Command(bin, args...)
	if len(env) > 0 {
		o.cmd.Env = append(os.Environ(), env...)
	}
	o.cmd.Stdout, o.cmd.Stderr = logFile, logFile
	o.cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true,            // ^C reaches the benchmark, which stops the operator itself
		Pdeathsig: syscall.SIGKILL, // a crashed benchmark takes its operator with it
	}
	if err := o.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start operator %s: %w", bin, err)
	}
	go func() {
		o.waitErr = o.cmd.Wait()
		close(o.done)
	}()
	go o.sampleRSS()
	err = poll(ctx, 90*time.Second, 100*time.Millisecond, func() (bool, error) {
		if o.exited() {
			return false, fmt.Errorf("operator exited: %v\n%s", o.waitErr, utils.TailFile(logPath, 30))
		}
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "Starting workers"), nil
	})
	if err != nil {
		o.stop()
		return nil, fmt.Errorf("operator did not start its workers: %w", err)
	}
	return o, nil
}

func (o *operator) pid() int { return o.cmd.Process.Pid }

func (o *operator) exited() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// sampleRSS keeps the highest resident set seen since the last takeMaxRSS; /proc's VmHWM would
// only give the peak of the whole life.
func (o *operator) sampleRSS() {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-o.done:
			return
		case <-o.stopRS:
			return
		case <-t.C:
		}
		if rss, err := procRSS(o.pid()); err == nil {
			o.mu.Lock()
			o.maxRSS = max(o.maxRSS, rss)
			o.mu.Unlock()
		}
	}
}

// takeMaxRSS returns the highest resident set since the last call and starts over.
func (o *operator) takeMaxRSS() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := o.maxRSS
	o.maxRSS = 0
	if rss, err := procRSS(o.pid()); err == nil {
		m = max(m, rss)
	}
	return m
}

// stop sends SIGTERM (a graceful stop gives the leader lease back) and kills after 30s.
func (o *operator) stop() {
	close(o.stopRS)
	if o.exited() {
		return
	}
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-o.done:
		return
	case <-time.After(30 * time.Second):
	}
	_ = o.cmd.Process.Kill()
	<-o.done
}

// snapshot is the counters at one moment.
type snapshot struct {
	api       measure.Requests
	redis     measure.CommandStats
	operator  time.Duration
	apiserver time.Duration
	kcm       time.Duration
}

// probes reads the counters of the API server, Redis and the processes.
type probes struct {
	cluster utils.LocalCluster
	cs      kubernetes.Interface
	rdb     *redis.Client
}

// profileAPIServer records kube-apiserver's CPU profile for d (none when d is 0) into path, in
// the background; the returned func waits for it and says where it went. The profile shows where
// the API server's time per object goes, which the request counts alone do not.
func (p probes) profileAPIServer(ctx context.Context, d time.Duration, path string) (wait func()) {
	return profileCPU(ctx, d, "kube-apiserver", path, func(ctx context.Context, seconds string) ([]byte, error) {
		return p.cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", seconds).Timeout(d + time.Minute).DoRaw(ctx)
	})
}

// profileController records the CPU profile of what runs the scenario (lockedjob's operator or
// Kueue's manager) from its pprof endpoint at addr, as profileAPIServer does kube-apiserver's.
func profileController(ctx context.Context, d time.Duration, addr, what, path string) (wait func()) {
	return profileCPU(ctx, d, what, path, func(ctx context.Context, seconds string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, d+time.Minute)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/profile?seconds="+seconds, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("get %s: %s", req.URL, resp.Status)
		}
		return io.ReadAll(resp.Body)
	})
}

// profileCPU runs get, which returns a CPU profile of the given number of seconds, for d (nothing
// when d is 0) in the background and writes it to path; the returned func waits for it and says
// where it went. A profile is a help, not a result: a failure is logged, not returned.
func profileCPU(ctx context.Context, d time.Duration, what, path string, get func(ctx context.Context, seconds string) ([]byte, error)) (wait func()) {
	if d <= 0 {
		return func() {}
	}
	done := make(chan error, 1)
	go func() {
		raw, err := get(ctx, strconv.Itoa(int(d.Seconds())))
		if err == nil {
			err = os.WriteFile(path, raw, 0o644)
		}
		done <- err
	}()
	return func() {
		if err := <-done; err != nil {
			log.Printf("%s profile: %v", what, err)
			return
		}
		log.Printf("%s profile (%s from the first create): %s", what, d, path)
	}
}

func (p probes) snapshot(ctx context.Context, op *supervisor) (snapshot, error) {
	var s snapshot
	raw, err := p.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return s, fmt.Errorf("read kube-apiserver /metrics: %w", err)
	}
	if s.api, err = measure.ParseRequests(string(raw)); err != nil {
		return s, fmt.Errorf("kube-apiserver /metrics: %w", err)
	}
	info, err := p.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return s, fmt.Errorf("redis INFO commandstats: %w", err)
	}
	if s.redis, err = measure.ParseCommandStats(info); err != nil {
		return s, fmt.Errorf("redis INFO commandstats: %w", err)
	}
	for name, dst := range map[string]*time.Duration{"kube-apiserver": &s.apiserver, "kube-controller-manager": &s.kcm} {
		pid, err := p.cluster.PID(name)
		if err != nil {
			return s, err
		}
		if *dst, err = procCPU(pid); err != nil {
			return s, err
		}
	}
	if op == nil {
		return s, nil
	}
	if s.operator, err = op.cpu(); err != nil {
		return s, err
	}
	return s, nil
}

// usage is what happened between two snapshots.
func usage(before, after snapshot, maxRSS int64) measure.Usage {
	return measure.Usage{
		API:          after.api.Sub(before.api),
		Redis:        after.redis.Sub(before.redis),
		OperatorCPU:  after.operator - before.operator,
		OperatorRSS:  maxRSS,
		APIServerCPU: after.apiserver - before.apiserver,
		KCMCPU:       after.kcm - before.kcm,
	}
}

// poll calls cond every interval until it reports true, returns an error, or timeout passes.
func poll(ctx context.Context, timeout, interval time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("gave up after %s", timeout)
			}
			return fmt.Errorf("interrupted: %w", ctx.Err())
		case <-t.C:
		}
	}
}
