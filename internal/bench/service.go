package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kadm"
)

// Service says how to start `projector run` as a process of its own, so
// that its memory is its own and it runs exactly as deployed.
type Service struct {
	// Path is the projector binary.
	Path string
	// Env is the process's whole environment; it carries the store and
	// Kafka settings (PROJECTOR_*).
	Env []string
}

// process is a running `projector run`.
type process struct {
	cmd  *exec.Cmd
	addr string
	out  *tailBuffer
	done chan struct{}
	err  error
}

// start runs the service with args after "run" and an HTTP address of its
// own.
func (s Service) start(args []string) (*process, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(s.Path, append(append([]string{"run"}, args...), "--http-addr", addr)...)
	cmd.Env = s.Env
	p := &process{cmd: cmd, addr: addr, out: &tailBuffer{max: 64 << 10}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s run: %w", s.Path, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// exited returns an error describing the process's end, with its last
// output, or nil while it runs.
func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("the service exited (%v); its last output:\n%s", p.err, p.out.String())
	default:
		return nil
	}
}

// waitReady waits until /readyz answers 200: the service has prepared the
// stores and joined its group, so consuming starts now.
func (p *process) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if code, _ := p.get(ctx, "/readyz"); code == http.StatusOK {
			return nil
		}
		if err := p.exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the service was not ready within %s; its last output:\n%s", timeout, p.out.String())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (p *process) get(ctx context.Context, path string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+path, nil)
	if err != nil {
		return 0, nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// metrics scrapes /metrics into samples keyed by name and labels, e.g.
// `projector_store_write_seconds_sum{store="index"}`; a histogram gives
// its _sum and _count.
func (p *process) metrics(ctx context.Context) (map[string]float64, error) {
	code, body := p.get(ctx, "/metrics")
	if code != http.StatusOK {
		return nil, fmt.Errorf("scrape the service's /metrics: status %d", code)
	}
	return parseMetrics(bytes.NewReader(body))
}

func parseMetrics(r io.Reader) (map[string]float64, error) {
	parser := expfmt.NewTextParser(pmodel.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			suffix := ""
			if len(labels) > 0 {
				suffix = "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[name+suffix] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[name+suffix] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[name+"_sum"+suffix] = m.GetHistogram().GetSampleSum()
				out[name+"_count"+suffix] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out, nil
}

// peakRSS reads the process's high-water mark of resident memory, in bytes.
func (p *process) peakRSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("read peak RSS: %w", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %q: %w", line, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmHWM in /proc/<pid>/status")
}

// stop sends SIGTERM and waits for the exit, killing the process when it
// takes longer than 30 s. It reports an unclean exit.
func (p *process) stop() error {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			return fmt.Errorf("the service did not stop within 30 s of SIGTERM; its last output:\n%s", p.out.String())
		}
	}
	if p.err != nil {
		return fmt.Errorf("the service exited with %v; its last output:\n%s", p.err, p.out.String())
	}
	return nil
}

// lag is the sum over the topic's partitions of end offset minus the
// group's committed offset.
func lag(ctx context.Context, adm *kadm.Client, topic, group string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return -1, fmt.Errorf("list end offsets: %w", err)
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return -1, fmt.Errorf("fetch committed offsets: %w", err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) {
		at := int64(0)
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok {
			at = c.At
		}
		total += o.Offset - at
	})
	return total, nil
}

// tailBuffer keeps the last max bytes written to it, for error reports.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
