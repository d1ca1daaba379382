package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
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
	case "generation":
		// switch --to is a generation's number, replay's a position.
		return []string{"push-job", "to"}
	case "redrive":
		// --dry-run is not among them: it means what replay's means,
		// change nothing, and PROJECTOR_DRY_RUN=true must keep both from
		// changing anything (issue 28: redrive sent).
		return []string{"group", "since", "batch", "timeout"}
	}
	return nil
}

// ignoredOnPurpose lists, per command, the PROJECTOR_<FLAG> variables of
// its own flags that it ignores without a word although another command
// reads them: the shipped ConfigMap sets PROJECTOR_GROUP for run, and
// redrive, run in a projector pod, must neither use the projector's group
// (issue 23) nor refuse to start. Any other PROJECTOR_<FLAG> of a flag the
// command reads from PROJECTOR_<COMMAND>_<FLAG> is refused (see
// foreignVariables).
var ignoredOnPurpose = map[string][]string{"redrive": {"group"}}

// renamedVariables are variables a command once read and reads no more,
// with what it reads now: set, they are a usage error, since the setting
// would be lost without a word (issue 28).
var renamedVariables = map[string]map[string]string{
	"redrive": {"PROJECTOR_REDRIVE_DRY_RUN": "--dry-run reads PROJECTOR_DRY_RUN, as replay's does"},
}

// foreignVariables refuses variables that look as if they set a flag of
// command but do not: PROJECTOR_<FLAG> of a flag that command reads from
// PROJECTOR_<COMMAND>_<FLAG> (help used to say every flag reads
// PROJECTOR_<FLAG>, and PROJECTOR_BATCH=10 projector redrive sent 1000 a
// batch), and a variable it read once. A command's own variable, when set,
// is what the operator meant: the other one is then left alone.
func foreignVariables(command string, getenv func(string) string) error {
	var problems []string
	for _, name := range ownVariables(command) {
		own, shared := config.CommandEnvName(command, name), config.EnvName(name)
		if getenv(own) != "" || getenv(shared) == "" || slices.Contains(ignoredOnPurpose[command], name) {
			continue
		}
		whose := "no command reads it"
		if readers := readersOf(shared); len(readers) > 0 {
			whose = "it is " + strings.Join(readers, " and ") + "'s, of another meaning"
		}
		problems = append(problems, fmt.Sprintf("%s is set, but projector %s reads --%s from %s (%s): set %s, or unset %s",
			shared, command, name, own, whose, own, shared))
	}
	for old, now := range renamedVariables[command] {
		if getenv(old) != "" {
			problems = append(problems, fmt.Sprintf("%s is no longer read: %s", old, now))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	slices.Sort(problems)
	return errors.New(strings.Join(problems, "; "))
}

// readersOf names the flags of every command that read variable, as
// "command --flag". It registers every command's flags (-h does no I/O).
func readersOf(variable string) []string {
	var out []string
	for _, fs := range allFlagSets(context.Background()) {
		fs.VisitAll(func(f *flag.Flag) {
			if variableOf(fs.Name(), f.Name) == variable {
				out = append(out, fs.Name()+" --"+f.Name)
			}
		})
	}
	return out
}

// variableOf returns the environment variable that the flag name of
// command reads.
func variableOf(command, name string) string {
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

// allFlagSets runs every command with -h, which returns as soon as its
// flags are registered, and returns their flag sets.
func allFlagSets(ctx context.Context) []*flag.FlagSet {
	var sets []*flag.FlagSet
	e := env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" },
		onFlagSet: func(fs *flag.FlagSet) { sets = append(sets, fs) }}
	for _, c := range commands() {
		_ = c.run(ctx, []string{"-h"}, e)
	}
	return sets
}

// knownVariables lists the variables of the flags of every command.
func knownVariables(ctx context.Context) map[string]bool {
	known := map[string]bool{embedAPIKeyEnv: true}
	for _, fs := range allFlagSets(ctx) {
		fs.VisitAll(func(f *flag.Flag) {
			known[variableOf(fs.Name(), f.Name)] = true
			if s, ok := f.Value.(*secretFile); ok && s.envVar != "" {
				known[s.envVar] = true
			}
		})
	}
	return known
}
