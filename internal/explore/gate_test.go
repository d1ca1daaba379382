package explore

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// gate is a writer's fault points (project.Faults): it holds the writer at
// the point the explorer names, tells the explorer, and lets it go on when
// told the next point to hold at.
type gate struct {
	mu sync.Mutex
	// target is the point to hold at: none when empty, the next one when
	// anyPoint.
	target string
	// batch numbers the owner's points by its batch (0: not numbered).
	batch   int
	passed  []string
	stopped chan string
	resume  chan string
	// journal, when set, is told when the owner has taken its token (the
	// point "token").
	journal *journal
	who     string
}

// anyPoint as a target holds the writer at whatever point comes next.
const anyPoint = "*"

func newGate(target string) *gate {
	return &gate{target: target, stopped: make(chan string), resume: make(chan string)}
}

func (g *gate) setBatch(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.batch = n
}

// At is called by the writer at each fault point.
func (g *gate) At(_ context.Context, point string) {
	g.mu.Lock()
	if g.batch > 0 {
		point = fmt.Sprintf("%d.%s", g.batch, point)
	}
	g.passed = append(g.passed, point)
	hold := g.target == anyPoint || g.target == point
	g.mu.Unlock()
	if point == stepToken && g.journal != nil {
		g.journal.add(entry{who: g.who, call: stepToken})
	}
	if !hold {
		return
	}
	g.stopped <- point
	next := <-g.resume
	g.mu.Lock()
	g.target = next
	g.mu.Unlock()
}

// trace lists the points the writer passed.
func (g *gate) trace() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return fmt.Sprint(g.passed)
}

// writer is a writer's goroutine, which the explorer owns: it waits for
// done on every path (finish).
type writer struct {
	name string
	gate *gate
	done chan struct{}
	err  error
	// held is set while the writer waits at a point, at.
	held bool
	at   string
}

func startWriter(name string, g *gate, run func() error) *writer {
	w := &writer{name: name, gate: g, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.err = run()
	}()
	return w
}

// stepTimeout bounds the wait for a writer to reach its next point or end:
// a writer that takes longer is stuck, which fails the case.
const stepTimeout = time.Minute

// wait waits until the writer holds at a point or has ended.
func (w *writer) wait() error {
	select {
	case p := <-w.gate.stopped:
		w.held, w.at = true, p
		return nil
	case <-w.done:
		w.held = false
		return nil
	case <-time.After(stepTimeout):
		return fmt.Errorf("%s neither reached a point nor ended within %s (passed %s)", w.name, stepTimeout, w.gate.trace())
	}
}

// goOn lets a held writer go on, to hold again at target.
func (w *writer) goOn(target string) {
	w.held = false
	w.gate.resume <- target
}

// finish lets the writer run to its end and waits for it.
func (w *writer) finish() error {
	for {
		if w.held {
			w.goOn("")
		}
		if err := w.wait(); err != nil {
			return err
		}
		if !w.held {
			return nil
		}
	}
}
