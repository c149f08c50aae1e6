// Command mutants is the mutation suite of durable: each mutant disables
// one mechanism a guarantee rests on, in a temporary copy of the
// repository, and the tests named with it must then fail. A mutant the
// tests do not catch means the guarantee has no proof.
//
//	scripts/mutants                  # every mutant (starts a throwaway Postgres)
//	scripts/mutants -run 'fence'     # the mutants whose name matches
//	scripts/mutants -list            # names, mechanisms and tests
//
// It prints caught/SURVIVED per mutant and exits non-zero if any survived,
// or if one no longer applies (its code changed: update the mutant). Run
// it with DATABASE_URL set and, for the tests that crash Postgres,
// DURABLE_PG_DIR (scripts/with-postgres sets both).
package main

import (
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Mutant disables one mechanism.
type Mutant struct {
	Name      string // short, unique, e.g. "fence/step"
	Mechanism string // what is removed, in words
	Edits     []Edit // applied together
	Pkg       string // package of the tests, relative to the repository root ("." for the root)
	Tests     string // the tests that must catch it, a -run regex
}

// Edit replaces Find, which must occur exactly once in File, by Replace.
type Edit struct {
	File, Find, Replace string
}

var all []Mutant

func register(ms ...Mutant) { all = append(all, ms...) }

type verdict struct {
	m       Mutant
	outcome string // caught, SURVIVED, STALE (an edit does not apply), BROKEN (does not build)
	detail  string // the failed tests, or what went wrong
	out     string // the test run's output
	took    time.Duration
}

func main() {
	run := flag.String("run", "", "only the mutants whose name matches this regular expression")
	skip := flag.String("skip", "", "leave out the mutants whose name matches this regular expression")
	list := flag.Bool("list", false, "list the mutants and exit")
	checkOnly := flag.Bool("check", false, "only check that every mutant still applies to the code")
	jobs := flag.Int("j", 2, "mutants tested at once (each in its own copy of the repository)")
	timeout := flag.Duration("timeout", 4*time.Minute, "longest test run of one mutant")
	keep := flag.Bool("v", false, "print the end of the test output of every mutant, not only of those that survive")
	ci := flag.Bool("ci", false, "only the mutants CI runs (ciSet: those of the guarantees)")
	flag.Parse()

	selected, err := selectMutants(*run, *skip, *ci)
	if err != nil {
		fatal(err)
	}
	if *list {
		for _, m := range selected {
			fmt.Printf("%-28s %s\n%-28s tests: %s (%s)\n", m.Name, m.Mechanism, "", m.Tests, m.Pkg)
		}
		return
	}
	root, err := repoRoot()
	if err != nil {
		fatal(err)
	}
	// Every mutant must apply to the code as it is, before any test runs.
	for _, m := range selected {
		if err := check(root, m); err != nil {
			fatal(fmt.Errorf("mutant %s is stale: %w", m.Name, err))
		}
	}
	if *checkOnly {
		fmt.Printf("%d mutants apply\n", len(selected))
		return
	}
	if os.Getenv("DATABASE_URL") == "" {
		fatal(fmt.Errorf("DATABASE_URL is not set: run scripts/mutants, which starts a throwaway Postgres"))
	}

	start := time.Now()
	if err := warm(root, selected); err != nil {
		fatal(err)
	}
	work := make(chan Mutant)
	results := make(chan verdict)
	var wg sync.WaitGroup
	for i := range max(*jobs, 1) {
		dir, err := copyRepo(root, i)
		if err != nil {
			fatal(err)
		}
		defer os.RemoveAll(dir)
		wg.Go(func() {
			for m := range work {
				results <- try(dir, m, *timeout)
			}
		})
	}
	// The root package's mutants go first: each compiles the engine's
	// test binary and most run tests with child processes, so the quick
	// ones fill the workers at the end instead of one slow one running
	// alone.
	order := slices.Clone(selected)
	slices.SortStableFunc(order, func(a, b Mutant) int {
		return cmp.Compare(rootFirst(a), rootFirst(b))
	})
	go func() {
		for _, m := range order {
			work <- m
		}
		close(work)
		wg.Wait()
		close(results)
	}()

	var failed int
	for v := range results {
		fmt.Printf("%-9s %-28s %6.1fs  %s\n", v.outcome, v.m.Name, v.took.Seconds(), firstLine(v.detail))
		if v.outcome != "caught" {
			failed++
		}
		switch {
		case *keep:
			fmt.Println(indent(tail(v.out, 60)))
		case v.outcome != "caught":
			fmt.Println(indent(tail(v.detail, 60)))
		}
	}
	fmt.Printf("%d mutants, %d caught, %d not, in %s\n", len(selected), len(selected)-failed, failed, time.Since(start).Round(time.Second))
	if failed > 0 {
		os.Exit(1)
	}
}

func rootFirst(m Mutant) int {
	if m.Pkg == "." {
		return 0
	}
	return 1
}

func selectMutants(run, skip string, ci bool) ([]Mutant, error) {
	seen := map[string]bool{}
	for _, m := range all {
		if seen[m.Name] {
			return nil, fmt.Errorf("two mutants named %s", m.Name)
		}
		seen[m.Name] = true
	}
	for name := range ciSet {
		if !seen[name] {
			return nil, fmt.Errorf("ciSet names %s, which is no mutant", name)
		}
	}
	runRE, err := regexp.Compile(run)
	if err != nil {
		return nil, err
	}
	var skipRE *regexp.Regexp
	if skip != "" {
		if skipRE, err = regexp.Compile(skip); err != nil {
			return nil, err
		}
	}
	var out []Mutant
	for _, m := range all {
		if runRE.MatchString(m.Name) && (skipRE == nil || !skipRE.MatchString(m.Name)) && (!ci || ciSet[m.Name]) {
			out = append(out, m)
		}
	}
	return out, nil
}

// check reports whether every edit of m applies to the files under root.
func check(root string, m Mutant) error {
	for _, e := range m.Edits {
		b, err := os.ReadFile(filepath.Join(root, e.File))
		if err != nil {
			return err
		}
		if n := bytes.Count(b, []byte(e.Find)); n != 1 {
			return fmt.Errorf("%s: the text to replace occurs %d times, want once:\n%s", e.File, n, e.Find)
		}
	}
	return nil
}

// try applies m in dir, runs its tests and restores the files.
func try(dir string, m Mutant, timeout time.Duration) (v verdict) {
	start := time.Now()
	v.m = m
	saved := map[string][]byte{}
	defer func() {
		for f, b := range saved {
			_ = os.WriteFile(f, b, 0o644)
		}
		v.took = time.Since(start)
	}()
	for _, e := range m.Edits {
		f := filepath.Join(dir, e.File)
		b, err := os.ReadFile(f)
		if err != nil {
			v.outcome, v.detail = "STALE", err.Error()
			return v
		}
		if _, ok := saved[f]; !ok {
			saved[f] = b
		}
		if bytes.Count(b, []byte(e.Find)) != 1 {
			v.outcome, v.detail = "STALE", e.File+": the text to replace is not there once"
			return v
		}
		if err := os.WriteFile(f, bytes.Replace(b, []byte(e.Find), []byte(e.Replace), 1), 0o644); err != nil {
			v.outcome, v.detail = "STALE", err.Error()
			return v
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	pkg, runIn := "./"+strings.TrimPrefix(filepath.ToSlash(m.Pkg), "./"), dir
	if _, err := os.Stat(filepath.Join(dir, m.Pkg, "go.mod")); err == nil && m.Pkg != "." {
		pkg, runIn = ".", filepath.Join(dir, m.Pkg) // a nested module
	}
	// -trimpath keeps the copies' directories out of the build cache's
	// keys: a package unchanged by the mutant compiles once for all copies.
	// -ldflags=-w links the test binary without debug information, which
	// a verdict never needs: about a sixth less link time per mutant.
	cmd := exec.CommandContext(ctx, "go", "test", "-trimpath", "-ldflags=-w", "-count=1", "-failfast", "-vet=off",
		"-timeout", timeout.String(), "-run", m.Tests, pkg)
	cmd.Dir = runIn
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	v.detail = out.String()
	v.out = v.detail
	switch {
	case err == nil && strings.Contains(v.detail, "no tests to run"):
		v.outcome, v.detail = "SURVIVED", "no test matched "+m.Tests+"\n"+v.detail
	case err == nil:
		v.outcome = "SURVIVED"
	case strings.Contains(v.detail, "[build failed]") || strings.Contains(v.detail, "[setup failed]"):
		v.outcome = "BROKEN"
	default:
		v.outcome = "caught"
		v.detail = failures(v.detail)
	}
	return v
}

// warm builds, once, the test binaries of the packages the mutants test,
// as the mutants build them but without running a test: the packages no
// mutant changes are then in the build cache before the workers start,
// instead of compiled by each of them at once.
func warm(root string, ms []Mutant) error {
	pkgs := map[string]bool{}
	for _, m := range ms {
		pkgs[m.Pkg] = true
	}
	for pkg := range pkgs {
		dir, target := root, "./"+strings.TrimPrefix(filepath.ToSlash(pkg), "./")
		if _, err := os.Stat(filepath.Join(root, pkg, "go.mod")); err == nil && pkg != "." {
			dir, target = filepath.Join(root, pkg), "."
		}
		cmd := exec.Command("go", "test", "-trimpath", "-ldflags=-w", "-count=1", "-vet=off", "-run", "^$", target)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build the tests of %s: %w\n%s", pkg, err, out)
		}
	}
	return nil
}

// failures keeps the names of the failed tests from go test's output.
func failures(out string) string {
	var names []string
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(t, "--- FAIL: "):
			name := strings.Fields(t)[2]
			// Keep a failed subtest, not its parent, which go test lists
			// above it (or below it, in output printed as it goes).
			n := len(names)
			switch {
			case n > 0 && strings.HasPrefix(names[n-1], name+"/"): // the parent, below
			case n > 0 && strings.HasPrefix(name, names[n-1]+"/"): // the parent was above
				names[n-1] = name
			default:
				names = append(names, name)
			}
		case strings.HasPrefix(t, "panic: test timed out"):
			names = append(names, "(timed out)")
		}
	}
	if len(names) == 0 {
		return "failed: " + firstLine(tail(out, 3))
	}
	return "by " + strings.Join(names, ", ")
}

// copyRepo copies the files git tracks (as they are in the work tree) to a
// new temporary folder.
func copyRepo(root string, i int) (string, error) {
	dir, err := os.MkdirTemp("", fmt.Sprintf("durable-mutants-%d-", i))
	if err != nil {
		return "", err
	}
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git ls-files: %w", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src, dst := filepath.Join(root, f), filepath.Join(dir, f)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or not a file
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", err
		}
		if err := copyFile(src, dst, fi.Mode()); err != nil {
			return "", err
		}
	}
	return dir, nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode.Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("run from inside the repository: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "mutants:", err)
	os.Exit(2)
}
