// Package proctest runs the current test binary again as a child process,
// so crash tests can SIGKILL, SIGSTOP and restart real processes. The
// child's TestMain recognises it by an environment variable the test sets.
//
// It is test-only and may not import the root durable package.
package proctest

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Timeout bounds every wait on a child.
const Timeout = 60 * time.Second

// Child is a running child process.
type Child struct {
	Cmd    *exec.Cmd
	Stdin  io.WriteCloser // closing it tells children that read stdin to stop
	Stderr *Buffer
	lines  chan string
	done   chan error
}

// Start runs os.Args[0] (no tests selected) with the parent's environment
// plus env. The child is killed at the end of the test; its stderr is
// logged if the test failed.
func Start(tb testing.TB, env ...string) *Child {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	c := &Child{Cmd: cmd, Stdin: stdin, Stderr: &Buffer{}, lines: make(chan string, 100), done: make(chan error, 1)}
	cmd.Stderr = c.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	go func() { c.done <- cmd.Wait() }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		if tb.Failed() {
			tb.Logf("child %v stderr:\n%s", env, c.Stderr.String())
		}
	})
	return c
}

// WaitLine waits for a stdout line with the given prefix and returns it.
func (c *Child) WaitLine(tb testing.TB, prefix string) string {
	tb.Helper()
	return c.WaitLineWithin(tb, prefix, Timeout)
}

// WaitLineWithin is WaitLine failing the test after d instead of Timeout.
func (c *Child) WaitLineWithin(tb testing.TB, prefix string, d time.Duration) string {
	tb.Helper()
	timeout := time.After(d)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				tb.Fatalf("child exited before printing %q; stderr:\n%s", prefix, c.Stderr.String())
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			tb.Fatalf("child did not print %q within %v; stderr:\n%s", prefix, d, c.Stderr.String())
		}
	}
}

// Wait waits for the child to exit and returns its exit error.
func (c *Child) Wait(tb testing.TB) error {
	tb.Helper()
	select {
	case err := <-c.done:
		return err
	case <-time.After(Timeout):
		tb.Fatalf("child did not exit; stderr:\n%s", c.Stderr.String())
		return nil
	}
}

// Kill sends SIGKILL and checks the child died of it.
func (c *Child) Kill(tb testing.TB) {
	tb.Helper()
	if err := c.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		tb.Fatal(err)
	}
	if err := c.Wait(tb); !KilledBySIGKILL(err) {
		tb.Fatalf("child did not die of SIGKILL: %v", err)
	}
}

// KilledBySIGKILL reports whether a child's exit error is death by SIGKILL.
func KilledBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// KillSelf SIGKILLs the calling process: as abrupt as an OOM kill.
func KillSelf() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never reached
}

// Buffer is a bytes.Buffer safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
