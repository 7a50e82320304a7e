// Command fencedwriter is the example workload of lockedjob: it runs as a LockedJob's container and
// writes to a fenced store (internal/fencedstore) with the fencing token the operator handed its
// pod in LOCKEDJOB_FENCING_TOKEN. The store refuses the writes of a holder that lost its lock to a
// later one, which is what keeps a paused or partitioned old holder from doing harm.
//
// It logs every write, accepted or refused, and records SIGTERM in the store's history, where it
// outlives the pod.
//
//	fencedwriter --store-addr 10.200.0.1:6379 --writes 5 --interval 1s
//	fencedwriter --store-addr 10.200.0.1:6379 --writes 0 --until-key drill:done   # until told to stop
//	fencedwriter --store-addr 127.0.0.1:6379 --store fencedstore:nightly --show   # the store's history
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/fencedstore"
)

type options struct {
	addr     string
	store    string
	writes   int
	interval time.Duration
	exitCode int
	show     bool
	untilKey string
}

func main() {
	var o options
	flag.StringVar(&o.addr, "store-addr", os.Getenv("FENCED_STORE_ADDR"), "host:port of the Redis that holds the fenced store (env FENCED_STORE_ADDR)")
	flag.StringVar(&o.store, "store", "", "the store's name (default: fencedstore:<LOCKEDJOB_LOCK>, and :slot<LOCKEDJOB_SLOT> after it for slots above 0)")
	flag.IntVar(&o.writes, "writes", 5, "how many writes to make (0: until stopped)")
	flag.DurationVar(&o.interval, "interval", time.Second, "time between writes")
	flag.IntVar(&o.exitCode, "exit-code", 0, "exit code after the last write (non-zero to play a failing Job)")
	flag.StringVar(&o.untilKey, "until-key", "", "stop writing once this key exists in the store's Redis (checked after every write; --writes still bounds it): a run that ends when told to, as a test or a handoff drill needs")
	flag.BoolVar(&o.show, "show", false, "print the store's history and its accepted/refused counts, and exit")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds | log.LUTC)
	if o.show {
		os.Exit(show(o, os.Stdout))
	}
	os.Exit(run(o))
}

// show prints the store's history, one line per entry, then the counts.
func show(o options, w io.Writer) int {
	if o.addr == "" || o.store == "" {
		log.Printf("--show needs --store-addr and --store")
		return 2
	}
	rdb := redis.NewClient(&redis.Options{Addr: o.addr})
	defer func() { _ = rdb.Close() }()
	h, err := fencedstore.New(rdb, o.store).History(context.Background())
	if err != nil {
		log.Print(err)
		return 1
	}
	// The report is built whole and written once, so a reader that went away (a closed pipe) shows
	// in the exit code instead of a silently short history.
	var b strings.Builder
	count := map[string]int{}
	for _, e := range h {
		count[e.Result]++
		switch e.Result {
		case fencedstore.ResultRefused:
			fmt.Fprintf(&b, "%s  refused   token=%d writer=%s (highest seen %d)\n", e.ID, e.Token, e.Writer, e.Highest)
		case fencedstore.ResultAccepted:
			fmt.Fprintf(&b, "%s  accepted  token=%d writer=%s %q\n", e.ID, e.Token, e.Writer, e.Value)
		default:
			fmt.Fprintf(&b, "%s  %-9s writer=%s %q\n", e.ID, e.Result, e.Writer, e.Value)
		}
	}
	fmt.Fprintf(&b, "store %s: %d accepted, %d refused\n", o.store, count[fencedstore.ResultAccepted], count[fencedstore.ResultRefused])
	if _, err := io.WriteString(w, b.String()); err != nil {
		log.Printf("write the history: %v", err)
		return 1
	}
	return 0
}

func run(o options) int {
	token, err := strconv.ParseInt(os.Getenv(batchv1alpha1.EnvFencingToken), 10, 64)
	if err != nil || token <= 0 {
		log.Printf("%s is missing or not a positive integer (%q): run me as a LockedJob's container", batchv1alpha1.EnvFencingToken, os.Getenv(batchv1alpha1.EnvFencingToken))
		return 2
	}
	if o.addr == "" {
		log.Printf("no store address: set --store-addr or FENCED_STORE_ADDR")
		return 2
	}
	lock := os.Getenv(batchv1alpha1.EnvLock)
	if o.store == "" {
		o.store = defaultStore(lock, os.Getenv(batchv1alpha1.EnvSlot))
	}
	writer, _ := os.Hostname()

	rdb := redis.NewClient(&redis.Options{Addr: o.addr, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	defer func() { _ = rdb.Close() }()
	store := fencedstore.New(rdb, o.store)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Printf("fencedwriter: fencing token=%d lock=%s holder=%s writer=%s store=%s at %s",
		token, lock, os.Getenv(batchv1alpha1.EnvHolder), writer, o.store, o.addr)

	accepted, refused := 0, 0
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for n := 1; o.writes == 0 || n <= o.writes; n++ {
		err := store.Write(ctx, token, writer, fmt.Sprintf("write %d by %s", n, writer))
		switch {
		case err == nil:
			accepted++
			log.Printf("accepted write %d token=%d", n, token)
		case errors.Is(err, fencedstore.ErrStaleToken):
			refused++
			log.Printf("refused write %d token=%d: %v", n, token, err)
		case ctx.Err() != nil:
		default:
			log.Printf("write %d token=%d failed: %v", n, token, err)
		}
		if o.writes != 0 && n == o.writes {
			break
		}
		told, err := stopKeySet(ctx, rdb, o.untilKey)
		if told {
			break
		}
		if err != nil && ctx.Err() == nil {
			log.Printf("read --until-key %s: %v", o.untilKey, err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return terminated(store, writer, token, accepted, refused)
		}
	}
	log.Printf("done: %d accepted, %d refused, exit %d", accepted, refused, o.exitCode)
	return o.exitCode
}

// stopKeySet tells whether the run was told to stop: key is set and exists.
func stopKeySet(ctx context.Context, rdb *redis.Client, key string) (bool, error) {
	if key == "" {
		return false, nil
	}
	n, err := rdb.Exists(ctx, key).Result()
	return n > 0, err
}

// terminated records the signal in the store's history (the pod and its log may be gone soon)
// and ends the way a workload stopped by Kubernetes should.
func terminated(store *fencedstore.Store, writer string, token int64, accepted, refused int) int {
	msg := fmt.Sprintf("SIGTERM received: token=%d accepted=%d refused=%d", token, accepted, refused)
	log.Print(msg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := store.Note(ctx, writer, msg); err != nil {
		log.Printf("recording the signal: %v", err)
	}
	return 143
}

// defaultStore names the store of a lock's holders. A semaphore's holders run side by side, one per
// slot, and each slot's fencing tokens order only that slot's holders: so the store is partitioned
// by slot, and slot 0 (every holder of a plain lock) keeps the lock's own name.
func defaultStore(lock, slot string) string {
	if slot == "" || slot == "0" {
		return "fencedstore:" + lock
	}
	return "fencedstore:" + lock + ":slot" + slot
}
