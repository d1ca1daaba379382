package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/projector/projector/internal/consume"
)

// adminFlags reach the admin endpoint of a running `projector run`.
type adminFlags struct {
	url   string
	token secretFile
}

func (a *adminFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.url, "admin-url", "http://127.0.0.1:8081", "the admin endpoint of the running projector (its --admin-addr)")
	a.token.envVar = adminTokenEnv
	fs.Var(&a.token, "admin-token-file", "file holding the endpoint's bearer token (or set "+adminTokenEnv+")")
}

// call sends one request to the admin endpoint and returns the body of a
// 2xx answer; any other answer is an error carrying the endpoint's words.
func (a *adminFlags) call(ctx context.Context, method, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(a.url, "/")+path, nil)
	if err != nil {
		return nil, usageError(fmt.Errorf("--admin-url: %w", err))
	}
	if a.token.secret != "" {
		req.Header.Set("Authorization", "Bearer "+a.token.secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reach the admin endpoint (is projector run started with --admin-addr?): %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("read the answer of %s: %w", a.url, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// partitionsCommand lists the partitions of a running member.
func partitionsCommand(ctx context.Context, args []string, e env) error {
	var a adminFlags
	fs := newFlagSet("partitions", "partitions [--admin-url URL]", e)
	a.register(fs)
	if err := parse(fs, args, e); err != nil {
		return err
	}
	body, err := a.call(ctx, http.MethodGet, "/partitions")
	if err != nil {
		return err
	}
	var parts []consume.PartitionState
	if err := json.Unmarshal(body, &parts); err != nil {
		return fmt.Errorf("the admin endpoint's answer: %w", err)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tSTATE\tNEXT OFFSET\tLAG\tOLDEST UNCOMMITTED\tREASON\tCAUSE")
	for _, p := range parts {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%.0fs\t%s\t%s\n", p.Topic, p.Partition, p.State, p.NextOffset, p.Lag,
			p.OldestUncommittedSeconds, p.Reason, p.Cause)
	}
	return tw.Flush()
}

// resumeCommand resumes a halted partition of a running member.
func resumeCommand(ctx context.Context, args []string, e env) error {
	var a adminFlags
	fs := newFlagSet("resume", "resume [--admin-url URL] <topic> <partition>", e)
	a.register(fs)
	if err := parseWithArgs(fs, args, e); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usageError(fmt.Errorf("want two arguments, the topic and the partition; got %d", fs.NArg()))
	}
	partition, err := strconv.ParseInt(fs.Arg(1), 10, 32)
	if err != nil || partition < 0 {
		return usageError(fmt.Errorf("partition %q: want a whole number", fs.Arg(1)))
	}
	body, err := a.call(ctx, http.MethodPost, "/partitions/"+url.PathEscape(fs.Arg(0))+"/"+strconv.FormatInt(partition, 10)+"/resume")
	if err != nil {
		return err
	}
	_, err = e.stdout.Write(body)
	return err
}
