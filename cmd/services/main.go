// Command services runs the real services of the tests and of local runs
// (internal/services). scripts/services.sh builds it and calls it with its
// own name as the program name and its checkout as -root:
//
//	services -root DIR up|down|status|env|clean [SERVICE...]
//	services -root DIR start|stop|restart|kill SERVICE...
package main

import (
	"context"
	"flag"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/projector/projector/internal/services"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	prog := args[0]
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", ".", "the checkout whose services these are")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	dir, err := filepath.Abs(*root)
	if err != nil {
		return services.Report(stderr, err)
	}
	cfg, err := services.ConfigFromEnv(dir, os.Getenv)
	if err != nil {
		return services.Report(stderr, err)
	}
	return services.Report(stderr, services.New(cfg, stdout, stderr).Run(ctx, prog, fs.Args()))
}
