package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Env is the machine, Go and Postgres the numbers were measured on.
type Env struct {
	GoVersion         string `json:"go_version"`
	GOOS              string `json:"goos"`
	GOARCH            string `json:"goarch"`
	NumCPU            int    `json:"num_cpu"`
	GOMAXPROCS        int    `json:"gomaxprocs"`
	CPUModel          string `json:"cpu_model"`
	Kernel            string `json:"kernel"`
	GitCommit         string `json:"git_commit"`
	GitDirty          bool   `json:"git_dirty"`
	PGHost            string `json:"pg_host"`
	Database          string `json:"database"`
	PGVersion         string `json:"pg_version"`
	PGVersionFull     string `json:"pg_version_full"`
	Fsync             string `json:"fsync"`
	SynchronousCommit string `json:"synchronous_commit"`
	WALSyncMethod     string `json:"wal_sync_method"`
	FullPageWrites    string `json:"full_page_writes"`
	CommitDelay       string `json:"commit_delay"`
	SharedBuffers     string `json:"shared_buffers"`
	MaxConnections    string `json:"max_connections"`
	SharedPreload     string `json:"shared_preload_libraries"`
}

func collectEnv(ctx context.Context, conn *pgx.Conn, db string) (Env, error) {
	e := Env{
		GoVersion:  runtime.Version(),
		GOOS:       runtime.GOOS,
		GOARCH:     runtime.GOARCH,
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		CPUModel:   cpuModel(),
		Kernel:     readTrim("/proc/sys/kernel/osrelease"),
		Database:   db,
	}
	cfg := conn.Config()
	e.PGHost = fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output(); err == nil {
		e.GitCommit = strings.TrimSpace(string(out))
		if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
			e.GitDirty = len(strings.TrimSpace(string(st))) > 0
		}
	}
	err := conn.QueryRow(ctx, `SELECT current_setting('server_version'), version(),
	current_setting('fsync'), current_setting('synchronous_commit'), current_setting('wal_sync_method'),
	current_setting('full_page_writes'), current_setting('commit_delay'), current_setting('shared_buffers'),
	current_setting('max_connections'), current_setting('shared_preload_libraries')`).Scan(
		&e.PGVersion, &e.PGVersionFull, &e.Fsync, &e.SynchronousCommit, &e.WALSyncMethod,
		&e.FullPageWrites, &e.CommitDelay, &e.SharedBuffers, &e.MaxConnections, &e.SharedPreload)
	if err != nil {
		return e, fmt.Errorf("read server settings: %w", err)
	}
	return e, nil
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
