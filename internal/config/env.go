// Package config binds command-line flags to PROJECTOR_* environment
// variables, the way the public contract promises: every flag --some-name
// also reads PROJECTOR_SOME_NAME, and a flag given on the command line wins.
// A command whose flag means something of its own, where another command
// has a flag of that name (redrive's --group is not run's), reads
// PROJECTOR_<COMMAND>_SOME_NAME instead, so that one environment (a
// Kubernetes ConfigMap) can serve every command.
package config

import (
	"flag"
	"fmt"
	"strings"
)

// EnvName returns the environment variable of a flag name.
func EnvName(flagName string) string {
	return "PROJECTOR_" + upper(flagName)
}

// CommandEnvName returns the environment variable of a flag that only
// command reads under that name: PROJECTOR_<COMMAND>_<FLAG>.
func CommandEnvName(command, flagName string) string {
	return "PROJECTOR_" + upper(command) + "_" + upper(flagName)
}

func upper(name string) string { return strings.ToUpper(strings.ReplaceAll(name, "-", "_")) }

// Parse parses args into fs, then sets every flag not given on the command
// line from its environment variable, named by envName and read through
// getenv. An invalid value names the variable it came from.
func Parse(fs *flag.FlagSet, args []string, getenv, envName func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		name := envName(f.Name)
		if v := getenv(name); v != "" {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("environment variable %s=%q (for --%s): %s", name, v, f.Name, problem(f, serr))
			}
		}
	})
	return err
}

// problem says what is wrong with a value the flag refused. The flag
// package reports a number or a boolean it cannot parse as just "parse
// error", so those say what they want instead.
func problem(f *flag.Flag, err error) string {
	kind, _ := flag.UnquoteUsage(f)
	switch kind {
	case "int", "uint", "float":
		return "want a number"
	case "duration":
		return "want a duration such as 30s or 5m"
	case "":
		if _, ok := f.Value.(interface{ IsBoolFlag() bool }); ok {
			return "want true or false"
		}
	}
	return err.Error()
}
