package testenv

import (
	"syscall"
	"testing"
	"time"
)

// ReportCPU reports, when b ends, the CPU time the benchmark's process
// spent per iteration (user and system, every thread: the driver's
// network goroutines and the GC too) as client-µs/op. A benchmark against
// a store measures mostly the server's time; this is the share of the
// machine the client's side of the call takes.
func ReportCPU(b *testing.B) {
	start := ProcessCPU()
	b.Cleanup(func() {
		if b.N > 0 {
			b.ReportMetric(float64((ProcessCPU()-start).Microseconds())/float64(b.N), "client-µs/op")
		}
	})
}

// ProcessCPU is the CPU time the process has spent so far, every thread.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
