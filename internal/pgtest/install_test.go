package pgtest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The set-up of a machine without the PostgreSQL server: scripts/
// install-postgres (called by scripts/with-postgres) installs it with the
// system's package manager, or says in one line what to run. It is run in
// a sandbox that installs nothing: a PATH of stubs (uname, id, apt-get,
// brew, dnf) and of the few real tools the scripts use, and a
// PG_SEARCH_ROOT under which scripts/pg looks for the server's usual
// install folders, empty unless a stub package manager "installs" fake
// binaries there.

// installBox is one sandbox.
type installBox struct {
	t       *testing.T
	root    string // PG_SEARCH_ROOT
	bin     string // stubs, first on PATH
	tools   string // links to real tools
	log     string // what the stubs were asked to do
	env     []string
	scripts string
}

func newInstallBox(t *testing.T, system string, uid int) *installBox {
	t.Helper()
	dir := t.TempDir()
	pg, err := scriptPath()
	require.NoError(t, err)
	b := &installBox{t: t, root: filepath.Join(dir, "root"), bin: filepath.Join(dir, "bin"), tools: filepath.Join(dir, "tools"),
		log: filepath.Join(dir, "log"), scripts: filepath.Dir(pg)}
	for _, d := range []string{b.root, b.bin, b.tools} {
		require.NoError(t, mkdir(d))
	}
	for _, tool := range []string{"bash", "dirname", "awk", "sort", "cut", "readlink", "cat", "mkdir", "chmod", "rm",
		"mktemp", "sed", "grep", "head", "tail", "tr", "touch"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("no %s on this machine: %v", tool, err)
		}
		require.NoError(t, os.Symlink(p, filepath.Join(b.tools, tool)))
	}
	b.stub("uname", `echo `+system)
	b.stub("id", `[ "$1" = -u ] && echo `+strconv.Itoa(uid))
	b.env = []string{"PATH=" + b.bin + ":" + b.tools, "PG_SEARCH_ROOT=" + b.root, "STUB_LOG=" + b.log, "HOME=" + dir}
	return b
}

func mkdir(d string) error { return os.MkdirAll(d, 0o755) }

// stub writes a command of the sandbox running body under bash; every
// call is logged first ("name args... [DEBIAN_FRONTEND]").
func (b *installBox) stub(name, body string) {
	b.t.Helper()
	script := "#!" + filepath.Join(b.tools, "bash") + "\n" +
		`echo "` + name + ` $* ${DEBIAN_FRONTEND:-}" >>"$STUB_LOG"` + "\n" + body + "\n"
	if name == "uname" || name == "id" {
		script = "#!" + filepath.Join(b.tools, "bash") + "\n" + body + "\n"
	}
	require.NoError(b.t, os.WriteFile(filepath.Join(b.bin, name), []byte(script), 0o755))
}

// fakeServer makes folder (under the search root) hold executables named
// like the server's.
const fakeServer = `d="$PG_SEARCH_ROOT/%s"; mkdir -p "$d"; for b in initdb pg_ctl postgres; do echo 'exit 0' >"$d/$b"; chmod +x "$d/$b"; done`

func (b *installBox) provides(folder string) string {
	return strings.Replace(fakeServer, "%s", folder, 1)
}

// run runs a script of scripts/ in the sandbox; it returns the exit code,
// stdout, stderr and the stubs' log.
func (b *installBox) run(script string, args ...string) (int, string, string, []string) {
	b.t.Helper()
	cmd := exec.Command(filepath.Join(b.scripts, script), args...)
	cmd.Env = b.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(b.t, err)
	}
	logged, _ := os.ReadFile(b.log)
	var calls []string
	if s := strings.TrimSpace(string(logged)); s != "" {
		calls = strings.Split(s, "\n")
	}
	return code, strings.TrimSpace(stdout.String()), strings.TrimSpace(stderr.String()), calls
}

// oneLine checks that the script failed, saying in one line what to run.
func oneLine(t *testing.T, code int, stderr, want string) {
	t.Helper()
	require.Equal(t, 1, code, stderr)
	require.NotContains(t, stderr, "\n", "one line")
	require.Contains(t, stderr, want)
	require.Contains(t, stderr, "DATABASE_URL")
}

func TestInstallPostgres(t *testing.T) {
	t.Parallel()
	t.Run("present", func(t *testing.T) {
		t.Parallel()
		b := newInstallBox(t, "Linux", 0)
		b.stub("apt-get", b.provides("usr/lib/postgresql/16/bin"))
		d := filepath.Join(b.root, "usr/lib/postgresql/15/bin")
		require.NoError(t, mkdir(d))
		for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
			require.NoError(t, os.WriteFile(filepath.Join(d, name), []byte("exit 0\n"), 0o755))
		}
		code, _, stderr, calls := b.run("install-postgres")
		require.Zero(t, code, stderr)
		require.Empty(t, calls, "nothing to install")
	})
	t.Run("debian-root", func(t *testing.T) {
		t.Parallel()
		b := newInstallBox(t, "Linux", 0)
		b.stub("apt-get", `[ "$1" != install ] || { `+b.provides("usr/lib/postgresql/16/bin")+`; }`)
		code, _, stderr, calls := b.run("install-postgres")
		require.Zero(t, code, stderr)
		require.Equal(t, []string{"apt-get update -qq noninteractive", "apt-get install -y -qq postgresql noninteractive"}, calls)
		require.Contains(t, stderr, "installing the PostgreSQL server")
	})
	t.Run("debian-root-dry-run", func(t *testing.T) {
		t.Parallel()
		b := newInstallBox(t, "Linux", 0)
		b.stub("apt-get", "")
		code, stdout, stderr, calls := b.run("install-postgres", "--dry-run")
		require.Zero(t, code, stderr)
		require.Empty(t, calls, "a dry run runs nothing")
		require.Equal(t, "+ apt-get update -qq\n+ apt-get install -y -qq postgresql", stdout)
	})
	t.Run("debian-not-root", func(t *testing.T) {
		t.Parallel()
		b := newInstallBox(t, "Linux", 1)
		b.stub("apt-get", "")
		code, _, stderr, calls := b.run("install-postgres")
		oneLine(t, code, stderr, "sudo apt-get install -y postgresql")
		require.Empty(t, calls)
	})
	t.Run("installed-elsewhere", func(t *testing.T) {
		t.Parallel()
		b := newInstallBox(t, "Linux", 0)
		b.stub("apt-get", "") // installs nothing where scripts/pg looks
		code, _, stderr, calls := b.run("install-postgres")
		require.Len(t, calls, 2)
		lines := strings.Split(stderr, "\n")
		oneLine(t, code, lines[len(lines)-1], "PG_BINDIR") // after the line saying it installs
	})
	t.Run("fedora", func(t *testing.T) {
		t.Parallel()
		b := newInstallBox(t, "Linux", 0)
		b.stub("dnf", "")
		code, _, stderr, calls := b.run("install-postgres")
		oneLine(t, code, stderr, "dnf install -y postgresql-server")
		require.Empty(t, calls)
	})
	t.Run("other-linux", func(t *testing.T) {
		t.Parallel()
		b := newInstallBox(t, "Linux", 0)
		code, _, stderr, _ := b.run("install-postgres")
		oneLine(t, code, stderr, "package manager")
	})
	t.Run("macos", func(t *testing.T) {
		t.Parallel()
		b := newInstallBox(t, "Darwin", 501)
		b.stub("brew", b.provides("opt/homebrew/opt/postgresql@15/bin"))
		code, _, stderr, calls := b.run("install-postgres")
		require.Zero(t, code, stderr)
		require.Equal(t, []string{"brew install postgresql@15"}, calls)
	})
	t.Run("macos-without-homebrew", func(t *testing.T) {
		t.Parallel()
		b := newInstallBox(t, "Darwin", 501)
		code, _, stderr, _ := b.run("install-postgres")
		oneLine(t, code, stderr, "https://brew.sh")
	})
}

// TestWithPostgresInstallsFirst: scripts/with-postgres installs the server
// before anything else, and stops with the one line when it cannot,
// without running the command; with DATABASE_URL set it only runs it.
func TestWithPostgresInstallsFirst(t *testing.T) {
	t.Parallel()
	b := newInstallBox(t, "Linux", 1)
	b.stub("apt-get", "")
	marker := filepath.Join(b.root, "ran")
	code, _, stderr, calls := b.run("with-postgres", "touch", marker)
	oneLine(t, code, stderr, "sudo apt-get install -y postgresql")
	require.Empty(t, calls)
	require.NoFileExists(t, marker)

	b.env = append(b.env, "DATABASE_URL=postgres://elsewhere/db")
	code, _, stderr, _ = b.run("with-postgres", "touch", marker)
	require.Zero(t, code, stderr)
	require.FileExists(t, marker)
}
