// Package netio has workflows that do network, file and database I/O.
package netio

import (
	"context"
	"database/sql"
	"io/ioutil"
	"net"
	"net/http"
	"os"
	"os/exec"

	"github.com/durable-go/durable"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

type app struct {
	pool   *pgxpool.Pool
	db     *sql.DB
	client *http.Client
	tx     pgx.Tx
}

func (a *app) bad(wctx durable.Context, url string) (int, error) {
	resp, err := http.Get(url) // want `http.Get in workflow code does its I/O again on every replay and may get another answer: do it in a durable.Step \(a durable.TxStep for database writes\)`
	if err != nil {
		return 0, err
	}
	req, _ := http.NewRequestWithContext(wctx, "GET", url, nil) // building a request is no I/O
	if resp, err = a.client.Do(req); err != nil {               // want `\(\*http.Client\).Do in workflow code does its I/O`
		return 0, err
	}
	_, _ = net.Dial("tcp", "localhost:1")          // want `net.Dial in workflow code`
	f, _ := os.Open("orders.csv")                  // want `os.Open in workflow code`
	_ = f.Close()                                  // want `\(\*os.File\).Close in workflow code`
	_ = os.WriteFile("out", nil, 0o600)            // want `os.WriteFile in workflow code`
	_, _ = ioutil.ReadFile("in")                   // want `ioutil.ReadFile in workflow code`
	_ = exec.Command("true").Run()                 // want `\(\*exec.Cmd\).Run in workflow code`
	_, _ = a.db.ExecContext(wctx, "DELETE FROM t") // want `\(\*sql.DB\).ExecContext in workflow code`
	_, _ = a.pool.Exec(wctx, "DELETE FROM t")      // want `\(\*pgxpool.Pool\).Exec in workflow code`
	_, _ = a.tx.Exec(wctx, "DELETE FROM t")        // want `\(pgx.Tx\).Exec in workflow code`
	return resp.StatusCode, nil
}

func (a *app) good(wctx durable.Context, url string) (int, error) {
	code, err := durable.Step(wctx, "fetch", func(ctx context.Context) (int, error) {
		resp, err := a.client.Get(url)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = os.ReadFile("orders.csv")
		return resp.StatusCode, nil
	}, nil)
	if err != nil {
		return 0, err
	}
	_, err = durable.TxStep(wctx, "write", func(ctx context.Context, tx pgx.Tx) (int64, error) {
		tag, err := tx.Exec(ctx, "INSERT INTO t VALUES ($1)", code)
		return tag.RowsAffected(), err
	}, nil)
	if err != nil {
		return 0, err
	}
	f := durable.Go(wctx, "ping", func(ctx context.Context) (bool, error) {
		c, err := net.Dial("tcp", "localhost:1")
		if err == nil {
			_ = c.Close()
		}
		return err == nil, nil
	}, nil)
	if _, err := f.Wait(); err != nil {
		return 0, err
	}
	charge := func(ctx context.Context) (string, error) {
		_, err := a.pool.Exec(ctx, "INSERT INTO charges VALUES (1)")
		return "ch_1", err
	}
	lookup := func(ctx context.Context) (string, error) {
		var id string
		err := a.pool.QueryRow(ctx, "SELECT id FROM charges").Scan(&id)
		return id, err
	}
	_, err = durable.IntentStep(wctx, "charge", charge, lookup, nil)
	return code, err
}
