/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controllers

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/controllers/guardedjob"
	"github.com/lockedjob/lockedjob/controllers/guardedpod"
	"github.com/lockedjob/lockedjob/controllers/lockedjob"
	"github.com/lockedjob/lockedjob/controllers/lockview"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
	// +kubebuilder:scaffold:imports
)

// The suite runs the real manager against a real kube-apiserver and etcd (envtest, with the
// binaries this project builds) and a real redis-server. No pods run in envtest: specs drive a Job
// to completion by writing its status, as the Job controller would.

const (
	timeout  = 20 * time.Second
	interval = 50 * time.Millisecond
)

var (
	ctx        context.Context
	cancel     context.CancelFunc
	testEnv    *envtest.Environment
	cfg        *rest.Config
	k8sClient  client.Client
	testScheme = runtime.NewScheme()

	redisSrv *redisserver.Server
	rdb      *redis.Client
	op       *operator
)

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controller Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	ctx, cancel = context.WithCancel(context.Background())
	SetDefaultEventuallyTimeout(timeout)
	SetDefaultEventuallyPollingInterval(interval)

	Expect(clientgoscheme.AddToScheme(testScheme)).To(Succeed())
	Expect(batchv1alpha1.AddToScheme(testScheme)).To(Succeed())
	// +kubebuilder:scaffold:scheme

	assets, err := k8sassets.Dir()
	Expect(err).NotTo(HaveOccurred())
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())

	// Assertions read through a live client, not the manager's cache, so they see what the API
	// server has now.
	k8sClient, err = client.New(cfg, client.Options{Scheme: testScheme})
	Expect(err).NotTo(HaveOccurred())

	redisSrv, err = redisserver.StartProcess()
	Expect(err).NotTo(HaveOccurred())
	rdb = redis.NewClient(&redis.Options{Addr: redisSrv.Addr(), ContextTimeoutEnabled: true})

	installGuard()
	op = startOperator()
})

var _ = AfterSuite(func() {
	if op != nil {
		op.stop()
	}
	cancel()
	if rdb != nil {
		_ = rdb.Close()
	}
	if redisSrv != nil {
		Expect(redisSrv.Close()).To(Succeed())
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// operator is one running manager with its own lock book, as one operator process would have.
type operator struct {
	book   *lockbook.Book
	cache  client.Reader // what the manager's cache holds
	cancel context.CancelFunc
	done   chan struct{}
}

// testIdentity is fixed, so a second operator (a "restart") derives the same tokens.
var testIdentity = locks.Identity{ClusterID: "envtest", TokenKey: []byte("envtest-token-key-0123456789")}

// startOperator starts a manager against the suite's API server and Redis. Waiting LockedJobs
// re-check only every 30s, so a spec that sees a handoff sooner proves the release wake-up.
func startOperator(mutate ...func(*Options)) *operator {
	GinkgoHelper()
	return startOperatorOn([]string{redisSrv.Addr()}, mutate...)
}

// startOperatorOn is startOperator on the Redis servers at addrs: more than one is Redlock. It
// sets up the LockedJob reconciler, the per-lock view and the guarded-Job reconciler as the
// operator does (Setup); the LockedCronJob specs run their reconciler on a fake clock of their own (startCronController).
func startOperatorOn(addrs []string, mutate ...func(*Options)) *operator {
	GinkgoHelper()
	var nodes []redis.UniversalClient
	for _, addr := range addrs {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1}))
	}
	opts := []redislock.Option{redislock.WithKeyPrefix("lockedjob:"), redislock.WithReleaseNotifications("lockedjob:released")}
	lockClient, err := redislock.New(nodes[0], opts...)
	if len(nodes) > 1 {
		lockClient, err = redislock.NewRedlock(nodes, opts...)
	}
	Expect(err).NotTo(HaveOccurred())

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     testScheme,
		Cache:      CacheOptions(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	book := lockbook.New(lockClient)
	o := Options{
		Identity:               testIdentity,
		ClusterScopeNamespaces: []string{"trusted"},
		LockedJob: lockedjob.Config{
			WaitBackoffMin:      30 * time.Second,
			WaitBackoffMax:      30 * time.Second,
			UnwatchedJobRecheck: time.Second,
		},
		View: lockview.Timing{MinInterval: 200 * time.Millisecond, Resync: 300 * time.Millisecond, Announce: 200 * time.Millisecond},
		// Guarded waiters, as the LockedJob's, re-check only every 30s: a handoff seen sooner proves
		// the release wake-up.
		GuardedJob:  guardedjob.Config{WaitBackoffMin: 30 * time.Second, WaitBackoffMax: 30 * time.Second},
		GuardedPod:  guardedpod.Config{WaitBackoffMin: 30 * time.Second, WaitBackoffMax: 30 * time.Second},
		Controllers: []string{LockedJob, LockView, GuardedJob, GuardedPod},
	}
	for _, m := range mutate {
		m(&o)
	}
	mctx, mcancel := context.WithCancel(ctx)
	Expect(Setup(mctx, mgr, book, o)).To(Succeed())
	started := &operator{book: book, cache: mgr.GetCache(), cancel: mcancel, done: make(chan struct{})}
	go func() {
		defer GinkgoRecover()
		defer close(started.done)
		Expect(mgr.Start(mctx)).To(Succeed())
	}()
	return started
}

// stop ends the manager the way a crash would, as far as Redis is concerned: renewals stop and no
// lock is released.
func (o *operator) stop() {
	o.cancel()
	<-o.done
	o.book.Stop()
}
