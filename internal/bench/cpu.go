package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Process is a process whose CPU a measurement reads: a store's server or
// the Kafka broker, by the file that holds its pid (the services' pid
// files), with the processes it started (PostgreSQL's backends).
type Process struct {
	Name    string
	PIDFile string
}

// clockTicks is the unit of /proc/<pid>/stat's times, sysconf(_SC_CLK_TCK),
// 100 on every Linux platform Go runs on but Alpha.
const clockTicks = 100

// cpuOf returns the CPU time (user and system) of pid and of every process
// below it, and of their children that ended (cutime, cstime), so that a
// PostgreSQL backend that exits mid-measurement still counts.
func cpuOf(pid int) (time.Duration, error) {
	children, err := childrenOf()
	if err != nil {
		return 0, err
	}
	var ticks int64
	todo := []int{pid}
	for len(todo) > 0 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		t, err := ticksOf(p)
		if err != nil {
			if p == pid {
				return 0, err
			}
			continue // ended meanwhile
		}
		ticks += t
		todo = append(todo, children[p]...)
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// ticksOf reads utime, stime, cutime and cstime of /proc/<pid>/stat.
func ticksOf(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(s[end+1:])
	// fields[0] is field 3 (state); utime..cstime are fields 14..17.
	if len(fields) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	var sum int64
	for _, f := range fields[11:15] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		sum += v
	}
	return sum, nil
}

// childrenOf maps each process to its children, from /proc/*/stat.
func childrenOf() (map[int][]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		end := strings.LastIndexByte(s, ')')
		fields := strings.Fields(s[end+1:])
		if end < 0 || len(fields) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			out[ppid] = append(out[ppid], pid)
		}
	}
	return out, nil
}

// readPID reads the first line of a pid file (PostgreSQL's postmaster.pid
// has more).
func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0, fmt.Errorf("%s: no pid: %w", path, err)
	}
	return pid, nil
}

// cpuSample is the CPU time of each process at one moment.
type cpuSample map[string]time.Duration

// sampleCPU reads the CPU of procs, and of the processes of pids by name;
// a process that cannot be read is left out of the sample, and so out of
// the measurement.
func sampleCPU(procs []Process, pids map[string]int) cpuSample {
	out := cpuSample{}
	for _, p := range procs {
		pid, err := readPID(p.PIDFile)
		if err != nil {
			continue
		}
		if t, err := cpuOf(pid); err == nil {
			out[p.Name] = t
		}
	}
	for name, pid := range pids {
		if t, err := cpuOf(pid); err == nil {
			out[name] = t
		}
	}
	return out
}

// since is the CPU each process spent from before to s, for the processes
// both samples hold.
func (s cpuSample) since(before cpuSample) map[string]float64 {
	out := map[string]float64{}
	for name, t := range s {
		if b, ok := before[name]; ok {
			out[name] = (t - b).Seconds()
		}
	}
	return out
}
