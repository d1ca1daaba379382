package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/projector/projector/internal/config"
)

// docFiles are the pages whose commands users copy into a shell.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../../README.md", "../../deploy/k8s/README.md"}
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append(files, pages...)
}

// docCommand is one `projector <command> ...` written in the docs.
type docCommand struct {
	where string // file:line
	line  string
	args  []string // after "projector"
	// inline: written in a sentence's code span, where a flag may be
	// named without its value.
	inline bool
}

// commandPattern finds "projector <command>" followed by its arguments,
// for the commands this build has.
func commandPattern() *regexp.Regexp {
	var names []string
	for _, c := range commands() {
		names = append(names, regexp.QuoteMeta(c.name))
	}
	return regexp.MustCompile(`(?:^|[\s/])projector ((?:` + strings.Join(names, "|") + `)(?: .*)?)$`)
}

// docCommands lists the commands of the docs' code blocks and inline code
// spans, with continuation lines joined and the shell's operators,
// comments and redirections cut off.
func docCommands(t *testing.T) []docCommand {
	t.Helper()
	var out []docCommand
	commandInDocs := commandPattern()
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		inBlock := false
		lines := strings.Split(string(b), "\n")
		for i := 0; i < len(lines); i++ {
			line, at := strings.TrimSpace(lines[i]), i+1
			if strings.HasPrefix(line, "```") {
				inBlock = !inBlock
				continue
			}
			var candidates []string
			if inBlock {
				for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
					i++
					line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(lines[i])
				}
				candidates = []string{line}
			} else {
				spans := strings.Split(line, "`")
				for j := 1; j < len(spans); j += 2 {
					candidates = append(candidates, spans[j])
				}
			}
			for _, c := range candidates {
				m := commandInDocs.FindStringSubmatch(shellCommand(c))
				if m == nil {
					continue
				}
				args, ok := splitWords(m[1])
				if !ok {
					t.Errorf("%s:%d: cannot split %q into words", file, at, c)
					continue
				}
				out = append(out, docCommand{where: file + ":" + strconv.Itoa(at), line: c, args: args, inline: !inBlock})
			}
		}
	}
	return out
}

// shellCommand cuts a shell line at its first comment, pipe, list operator
// or redirection: what follows belongs to another program. A <placeholder>
// is a word, not a redirection.
func shellCommand(s string) string {
	quote := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '<':
			quote = '>'
		case c == '#' && (i == 0 || s[i-1] == ' '), c == '|', c == ';', c == '>', c == '&':
			return strings.TrimSpace(s[:i])
		}
	}
	return strings.TrimSpace(s)
}

// splitWords splits a command line into words as a POSIX shell would for
// the quoting the docs use (single and double quotes, no expansions). A
// <placeholder> is one word, and a synopsis' [optional flags] are read as
// the flags.
func splitWords(s string) ([]string, bool) {
	s = strings.NewReplacer("[", "", "]", "").Replace(s)
	var (
		words []string
		word  strings.Builder
		in    bool
		quote byte
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			if c == '>' {
				word.WriteByte(c)
			}
			quote = 0
		case quote != 0:
			word.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == '<':
			quote, in = '>', true
			word.WriteByte(c)
		case c == ' ' || c == '\t':
			if in {
				words = append(words, word.String())
				word.Reset()
				in = false
			}
		default:
			word.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, word.String())
	}
	return words, quote == 0
}

// takesArguments are the commands that take positional arguments; every
// other command refuses them (unexpectedArgument).
var takesArguments = map[string]bool{"ids": true, "resume": true, "generation": true}

// TestDocsCommandsParse reads every `projector <command> ...` of the README
// and docs/ the way the command would, so a command copied from the docs
// never stops at an unknown flag, a flag of another command or an
// argument the command refuses. Values are only parsed, nothing runs.
func TestDocsCommandsParse(t *testing.T) {
	cmds := docCommands(t)
	if len(cmds) < 20 {
		t.Fatalf("found %d commands in the docs, want the recipes of docs/operations.md and the README at least", len(cmds))
	}
	checked := 0
	for _, dc := range cmds {
		name, args := dc.args[0], dc.args[1:]
		if strings.Contains(dc.line, "...") {
			continue // an elided example
		}
		fs := flagSetOf(t, name)
		fs.SetOutput(io.Discard)
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			continue
		case err != nil && dc.inline && strings.HasPrefix(err.Error(), "flag needs an argument"):
			continue // a sentence naming a flag
		case err != nil:
			t.Errorf("%s: %q: %v", dc.where, dc.line, err)
			continue
		}
		if fs.NArg() > 0 && !takesArguments[name] {
			t.Errorf("%s: %q: projector %s takes no argument, but the docs give %q", dc.where, dc.line, name, fs.Args())
		}
		checked++
	}
	t.Logf("%d commands of the docs parsed", checked)
}

// flagSetOf returns the flag set command name creates, with every flag
// registered, by asking the command for its help.
func flagSetOf(t *testing.T, name string) *flag.FlagSet {
	t.Helper()
	var sets []*flag.FlagSet
	e := env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" },
		onFlagSet: func(fs *flag.FlagSet) { sets = append(sets, fs) }}
	for _, c := range commands() {
		if c.name == name {
			_ = c.run(context.Background(), []string{"-h"}, e)
		}
	}
	if len(sets) != 1 {
		t.Fatalf("projector %s created %d flag sets, want one", name, len(sets))
	}
	return sets[0]
}

// TestDocsVariablesExist checks that every PROJECTOR_* variable the docs,
// the compose file and the manifests set or name is read by some flag, so
// a copied ConfigMap or export never sets a variable nothing reads.
func TestDocsVariablesExist(t *testing.T) {
	files := append(docFiles(t), "../../docker-compose.yml")
	manifests, err := filepath.Glob("../../deploy/k8s/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, manifests...)
	known := knownVariables(context.Background())
	variable := regexp.MustCompile(`PROJECTOR_[A-Z0-9_]*[A-Z0-9]`)
	seen := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, v := range variable.FindAllString(line, -1) {
				seen++
				example := v == "PROJECTOR_SOME_NAME" // the naming rule's own example
				for _, old := range renamedVariables {
					_, renamed := old[v] // an upgrade note's old name
					example = example || renamed
				}
				notFlag := slices.ContainsFunc(notFlagPrefixes, func(p string) bool { return strings.HasPrefix(v+"_", p) })
				if !known[v] && !example && !notFlag {
					t.Errorf("%s:%d: %s is read by no flag of any command", file, i+1, v)
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no PROJECTOR_* variable found in the docs")
	}
}

// TestChangelog holds CHANGELOG.md to the form of Keep a Changelog: an
// Unreleased section and versions with dates, each linked, their changes
// under the usual headings, and an upgrade note naming every variable and
// flag renamed (issue 28: it was dated, not versioned, and renames sat
// under "Changed" with no word on what to do).
func TestChangelog(t *testing.T) {
	b, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	version := regexp.MustCompile(`^## \[(Unreleased|\d+\.\d+\.\d+)\]( - \d{4}-\d{2}-\d{2})?$`)
	sections := []string{"Upgrade", "Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
	var versions []string
	for i, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			m := version.FindStringSubmatch(line)
			if m == nil || (m[1] != "Unreleased") != (m[2] != "") {
				t.Errorf("CHANGELOG.md:%d: %q, want ## [Unreleased] or ## [x.y.z] - YYYY-MM-DD", i+1, line)
				continue
			}
			versions = append(versions, m[1])
		case strings.HasPrefix(line, "### "):
			if !slices.Contains(sections, strings.TrimPrefix(line, "### ")) {
				t.Errorf("CHANGELOG.md:%d: section %q, want one of %v", i+1, line, sections)
			}
		}
	}
	if len(versions) < 2 || versions[0] != "Unreleased" {
		t.Fatalf("versions %v, want Unreleased first and released versions after", versions)
	}
	for _, v := range versions {
		if !strings.Contains(text, "\n["+v+"]: ") {
			t.Errorf("CHANGELOG.md has no link for [%s]", v)
		}
	}
	unreleased := text[strings.Index(text, "## [Unreleased]"):]
	unreleased = unreleased[:strings.Index(unreleased[1:], "\n## ")+1]
	upgrade, _, _ := strings.Cut(unreleased[strings.Index(unreleased, "### Upgrade"):], "\n### Added")
	var renamed []string
	for _, old := range renamedVariables {
		for v := range old {
			renamed = append(renamed, v)
		}
	}
	for _, fs := range flagSets(t) {
		fs.VisitAll(func(f *flag.Flag) {
			if r, ok := f.Value.(renamedFlag); ok {
				renamed = append(renamed, fs.Name()+" --"+f.Name, strings.Fields(r.now)[0])
			}
		})
		for _, name := range ownVariables(fs.Name()) {
			renamed = append(renamed, config.CommandEnvName(fs.Name(), name))
		}
	}
	for _, r := range renamed {
		if !strings.Contains(upgrade, r) && !strings.Contains(upgrade, strings.TrimPrefix(r, "publish ")) {
			t.Errorf("the Upgrade notes of Unreleased do not name %s", r)
		}
	}
}
