// Package benchkit holds what the project's benchmarks share: the CPU time
// of processes read from /proc, the load average, a CPU profile of the
// running process, and the 3-step no-op workflow the Temporal benchmarks
// run through the adapter and on the raw SDK.
package benchkit

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
)

// userHZ is the unit of /proc/<pid>/stat's times (USER_HZ), 100 on Linux.
const userHZ = 100

// ProcCPU is the utime+stime of process pid from /proc, with withChildren
// also that of its children it has waited for (cutime+cstime); 0 when the
// process is gone.
func ProcCPU(pid int, withChildren bool) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	fields := f[11:13] // utime, stime
	if withChildren {
		fields = f[11:15] // and cutime, cstime
	}
	var ticks int64
	for _, v := range fields {
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ
}

// comm is a process's command name; "" when it is gone.
func comm(pid string) string {
	c, _ := os.ReadFile("/proc/" + pid + "/comm")
	return strings.TrimSpace(string(c))
}

// ChildNamed finds the child of this process whose command name is name.
func ChildNamed(name string) (int, error) {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, t := range tasks {
		raw, _ := os.ReadFile(t)
		for _, pid := range strings.Fields(string(raw)) {
			if comm(pid) == name {
				return strconv.Atoi(pid)
			}
		}
	}
	return 0, fmt.Errorf("no child process named %q", name)
}

// PostgresCPU is the CPU the local Postgres server has used so far: every
// process named postgres, with what the postmaster's exited children (the
// backends of closed connections) used.
func PostgresCPU() time.Duration {
	var total time.Duration
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if comm(filepath.Base(d)) == "postgres" {
			pid, _ := strconv.Atoi(filepath.Base(d))
			total += ProcCPU(pid, true)
		}
	}
	return total
}

// LoadAvg is /proc/loadavg's three averages, "unknown" when unreadable.
func LoadAvg() string {
	f := strings.Fields(func() string { b, _ := os.ReadFile("/proc/loadavg"); return string(b) }())
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// StartCPUProfile profiles this process into path until stop is called.
func StartCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// ThreeNoopSteps is the workflow both sides of the Temporal benchmarks run:
// kind, version 1, three steps s1..s3 of step, each body being body.
func ThreeNoopSteps(reg *port.Registry, kind port.Kind, step port.ActivityRef[string, string], body func(context.Context, string) (string, error)) error {
	if err := reg.Register(port.Definition{Kind: kind, Version: 1, Retry: port.FileRetry(),
		Handler: port.Handle(func(f port.Flow, in string) error {
			for _, name := range []string{"s1", "s2", "s3"} {
				var err error
				if in, err = step.Run(f, name, in); err != nil {
					return err
				}
			}
			return nil
		})}); err != nil {
		return err
	}
	return reg.RegisterActivity(port.Bind(step, body))
}

// RawWorker is the raw SDK's side of the Temporal benchmarks: a worker on
// queue with the options Engine.Start sets that bear on speed (slots of
// each kind, the adapter's sticky schedule-to-start timeout), serving
// RawWorkflow as "raw.three" with body as its step "raw.noop". The caller
// starts it.
func RawWorker(c client.Client, queue string, slots int, body func(context.Context, string) (string, error)) worker.Worker {
	w := worker.New(c, queue, worker.Options{
		MaxConcurrentActivityExecutionSize:      slots,
		MaxConcurrentWorkflowTaskExecutionSize:  slots,
		MaxConcurrentLocalActivityExecutionSize: slots,
		StickyScheduleToStartTimeout:            temporaladapter.DefaultStickyTimeout,
	})
	w.RegisterWorkflowWithOptions(RawWorkflow, workflow.RegisterOptions{Name: "raw.three"})
	w.RegisterActivityWithOptions(body, activity.RegisterOptions{Name: "raw.noop"})
	return w
}

// RawWorkflow is ThreeNoopSteps written directly on the SDK.
func RawWorkflow(ctx workflow.Context, in string) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	for range 3 {
		if err := workflow.ExecuteActivity(ctx, "raw.noop", in).Get(ctx, &in); err != nil {
			return "", err
		}
	}
	return in, nil
}

// Median is the median of xs (NaN for none): with an even count the mean of
// the two middle values, not the upper one, which would flatter a ratio.
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	switch {
	case len(s) == 0:
		return math.NaN()
	case len(s)%2 == 0:
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}
