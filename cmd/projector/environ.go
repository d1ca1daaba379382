package main

import (
	"context"
	"flag"
	"io"
	"slices"
	"strings"

	"github.com/projector/projector/internal/config"
)

// notFlagPrefixes start PROJECTOR_* names that the binary reads, or that the
// development services set, without a flag of the same name: the secrets
// that have no flag (they are found on their secretFile flags) and these.
var notFlagPrefixes = []string{
	"PROJECTOR_FAULTS",  // fault.Env: the test-only fault points of a -tags faults build
	"PROJECTOR_SECURE_", // scripts/services.sh env: the secured endpoints, for the tests
	"PROJECTOR_TEST_",   // scripts/services.sh env: what only the tests use
}

// ownVariables lists the flags of command that read
// PROJECTOR_<COMMAND>_<FLAG> rather than PROJECTOR_<FLAG>: those whose name
// another command also has with another meaning, so that one environment
// (the ConfigMap that configures run) cannot change them by accident;
// redrive's --group once read the projector's PROJECTOR_GROUP. The commands
// of the public contract (run, replay, reconcile, ids, publish) keep
// PROJECTOR_<FLAG> for every flag, as it promises; the others yield.
func ownVariables(command string) []string {
	switch command {
	case "bench":
		return []string{"partitions", "timeout", "cpu-profile"}
	case "migrate", "probe":
		return []string{"timeout"}
	case "ledger-prune":
		return []string{"batch", "push-job"}
	case "redrive":
		return []string{"group", "since", "batch", "timeout", "dry-run"}
	}
	return nil
}

// variable returns the environment variable that the flag name of command
// reads.
func variable(command, name string) string {
	if slices.Contains(ownVariables(command), name) {
		return config.CommandEnvName(command, name)
	}
	return config.EnvName(name)
}

// unknownVariables returns a warning for each PROJECTOR_* variable of
// environ that no flag of any command reads: most likely a misspelt name,
// whose setting would otherwise be lost without a word. Every command is
// asked, not only the one that runs, since one environment (a ConfigMap)
// often serves several.
func unknownVariables(ctx context.Context, environ []string) []string {
	known := knownVariables(ctx)
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "PROJECTOR_") || known[name] || slices.ContainsFunc(notFlagPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		out = append(out, name+" is set, but no flag of any command reads it (misspelt? `projector <command> -h` lists the flags)")
	}
	slices.Sort(out)
	return out
}

// knownVariables runs every command with -h, which returns as soon as its
// flags are registered, and lists the variables of those flags.
func knownVariables(ctx context.Context) map[string]bool {
	var sets []*flag.FlagSet
	e := env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" },
		onFlagSet: func(fs *flag.FlagSet) { sets = append(sets, fs) }}
	for _, c := range commands() {
		_ = c.run(ctx, []string{"-h"}, e)
	}
	known := map[string]bool{embedAPIKeyEnv: true}
	for _, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) {
			known[variable(fs.Name(), f.Name)] = true
			if s, ok := f.Value.(*secretFile); ok && s.envVar != "" {
				known[s.envVar] = true
			}
		})
	}
	return known
}
