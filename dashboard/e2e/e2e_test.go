// Package e2e tests the dashboard in a real headless Chromium. It is its own
// module so the library never depends on the browser driver.
package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/agentkit/agentkittest"
	"github.com/durable-go/durable/dashboard"
	"github.com/durable-go/durable/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	token   = "e2e-token-0123456789abcdef"
	hostile = `<script>alert(1)</script><b>x</b>`
	runID   = "refund-7"
	// EnvRequireBrowser=1 turns a missing Chromium into a failure (CI).
	EnvRequireBrowser = "DURABLE_REQUIRE_BROWSER"
	// EnvScreenshots=1 writes screenshots of the run page to testdata/.
	EnvScreenshots = "DURABLE_SCREENSHOTS"
)

// chromium finds Debian's chromium, or skips (fails under
// DURABLE_REQUIRE_BROWSER=1).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium found in PATH (looked for chromium, chromium-browser, google-chrome, headless-shell); install it with `apt-get install chromium`"
	if os.Getenv(EnvRequireBrowser) == "1" {
		t.Fatalf("%s (%s=1 requires the browser test to run)", msg, EnvRequireBrowser)
	}
	t.Skip(msg)
	return ""
}

// browser starts a headless Chromium with a fresh profile, set up for a
// closed network: nothing is fetched in the background.
func browser(t *testing.T) context.Context {
	exe := chromium(t)
	dir, err := os.MkdirTemp("", "durable-e2e-chromium-")
	require.NoError(t, err)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
		chromedp.Flag("mute-audio", true),
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(1280, 1000),
	)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		_ = os.RemoveAll(dir)
	})
	// Start the browser now, on a context without a deadline (the first
	// Run's context owns the browser).
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")))
	return ctx
}

func TestDashboardInBrowser(t *testing.T) {
	start := time.Now()
	logf := func(format string, args ...any) {
		t.Helper()
		t.Logf("%5.1fs "+format, append([]any{time.Since(start).Seconds()}, args...)...)
	}
	bctx := browser(t)
	logf("browser started")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// An agent whose refund tool needs approval, against a scripted model:
	// turn 0 asks for the refund, turn 1 (held until the test lets it go)
	// streams the final answer.
	release := make(chan struct{})
	var released atomic.Bool
	defer func() {
		if released.CompareAndSwap(false, true) {
			close(release)
		}
	}()
	model := agentkittest.NewServer(func(r *agentkittest.Request) agentkittest.Reply {
		if r.Turn == 1 {
			return agentkittest.Reply{ToolCalls: []agentkit.ToolCall{{Name: "refund", Arguments: []byte(`{"amount":42}`)}}}
		}
		return agentkittest.Reply{Text: "Refunded 42 euros. All done.", Hold: release}
	})
	defer model.Close()
	openai, err := agentkit.NewOpenAI(agentkit.OpenAIConfig{BaseURL: model.URL, Model: "scripted", APIKey: "sk-test", Timeout: 5 * time.Minute})
	require.NoError(t, err)

	eng, err := durable.New(pgtest.Pool(t), &durable.Config{Schema: pgtest.Schema(t), AppVersion: "e2e",
		LeaseTTL: time.Second, PollInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	var refunded atomic.Int64
	agent := agentkit.Define(eng, "refunder", agentkit.AgentConfig{
		Model:  openai,
		Stream: true,
		Tools: []*agentkit.Tool{agentkit.StepTool("refund", "Refund the customer.", nil,
			func(ctx context.Context, a struct {
				Amount int64 `json:"amount"`
			}) (string, error) {
				refunded.Add(a.Amount)
				return fmt.Sprintf("refunded %d", a.Amount), nil
			}, &agentkit.ToolOpts{Approval: &agentkit.ApprovalPolicy{Timeout: time.Hour}})},
	})
	require.NoError(t, eng.Launch(ctx))
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = eng.Shutdown(sctx)
	}()
	logf("engine launched")
	h, err := agent.Start(ctx, agentkit.Input{Prompt: "Refund order 7. " + hostile}, &durable.StartOpts{ID: runID})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p, err := agentkit.Pending(ctx, eng, runID)
		return err == nil && len(p) == 1
	}, 3*time.Minute, 20*time.Millisecond)

	handler, err := dashboard.New(eng, &dashboard.Options{Token: token, RefreshInterval: 200 * time.Millisecond})
	require.NoError(t, err)
	srv := httptest.NewServer(handler)
	defer func() {
		srv.CloseClientConnections() // the page's live stream
		srv.Close()
	}()

	// Without the token: refused, and nothing of the run leaks.
	resp, err := http.Get(srv.URL + "/run?id=" + runID)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.NotContains(t, string(body), "refund-7")

	// No script of the page may open a dialog (the hostile input would).
	var dialogs atomic.Int32
	go func() {
		for _, err := range chromedp.Events(bctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			dialogs.Add(1)
			_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()

	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		logf("browser: %s", what)
		c, cancel := context.WithTimeout(bctx, 3*time.Minute)
		defer cancel()
		require.NoError(t, chromedp.Do(c, steps...), what)
	}
	eval := func(expr string) any {
		t.Helper()
		c, cancel := context.WithTimeout(bctx, time.Minute)
		defer cancel()
		v, err := chromedp.Run(c, chromedp.Evaluate[any](expr))
		require.NoError(t, err, expr)
		return v
	}
	text := func(sel string) string {
		t.Helper()
		return fmt.Sprint(eval(`document.querySelector(` + jsString(sel) + `).textContent`))
	}
	// waitFor polls expr until it is true; errors of a page that is
	// navigating away count as not yet.
	waitFor := func(what, expr string) {
		t.Helper()
		logf("browser: wait for %s", what)
		deadline := time.Now().Add(3 * time.Minute)
		var last error
		for time.Now().Before(deadline) {
			c, cancel := context.WithTimeout(bctx, 30*time.Second)
			ok, err := chromedp.Run(c, chromedp.Evaluate[bool]("Boolean("+expr+")"))
			cancel()
			if err == nil && ok {
				return
			}
			last = err
			time.Sleep(50 * time.Millisecond)
		}
		c, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		state, _ := chromedp.Run(c, chromedp.Evaluate[string](`location.href + " | " + document.title + " | " + document.body.innerText.slice(0, 2000)`))
		screenshot(t, bctx, "failure.png")
		t.Fatalf("waiting for %s: %q still false (last error: %v); the page: %s", what, expr, last, state)
	}

	// Sign in with the token.
	run("sign in",
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#runs")),
	)
	require.Contains(t, text("#runs"), runID)
	require.Contains(t, text("#runs"), "agentkit.approval:")
	screenshot(t, bctx, "runs.png")

	// The pending approval is listed.
	run("approvals", chromedp.Navigate(srv.URL+"/approvals"), chromedp.WaitVisible(chromedp.CSS("#pending")))
	require.Contains(t, text("#pending"), "refund")
	require.Contains(t, text("#pending"), `{"amount":42}`)

	// Open the run from the list.
	run("open the run",
		chromedp.Navigate(srv.URL+"/"),
		chromedp.Click(chromedp.CSS(`#runs a[href*="`+runID+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#approvals .approve")),
	)
	require.Equal(t, runID, text("#run-id"))
	require.Equal(t, "pending", text("#run-status"))
	// The step timeline: one bar and one row per recorded step.
	bars := eval(`document.querySelectorAll("#timeline svg g.step rect").length`).(float64)
	rows := eval(`document.querySelectorAll("#steps tbody tr").length`).(float64)
	require.GreaterOrEqual(t, bars, 2.0)
	require.Equal(t, bars, rows)
	require.Contains(t, text("#steps"), "agentkit")
	// The hostile input is text: the characters are there, no element was made.
	require.Contains(t, text("#input"), hostile)
	require.Equal(t, 0.0, eval(`document.querySelector("#input").children.length`))
	require.Equal(t, 0.0, eval(`document.querySelectorAll("main b + b, #input b, main script").length`))
	require.Contains(t, text(`ol.entries[data-key="agentkit.events"]`), "approval_pending")
	screenshot(t, bctx, "run-pending.png")

	// Approve by clicking, once the run is parked on the approval (the page
	// is then still: nothing changes until the decision).
	waitFor("the run to wait on the approval", `document.getElementById("summary").textContent.includes("waiting on agentkit.approval:")`)
	run("approve", chromedp.Click(chromedp.CSS("#approvals .approve")))
	waitFor("the page after the approval", `document.readyState === "complete" && document.getElementById("run-id") !== null && document.querySelector("#approvals") === null`)
	require.Equal(t, int64(42), refunded.Load())
	eval(`window.durableE2E = "same page"`)
	before := eval(`document.querySelectorAll("ol.entries li").length`).(float64)

	// Let the model answer: the stream and then the status update live,
	// without reloading the page.
	released.Store(true)
	close(release)
	waitFor("the run to show success", `document.getElementById("run-status").textContent === "success"`)
	require.Equal(t, "same page", eval(`window.durableE2E`))
	after := eval(`document.querySelectorAll("ol.entries li").length`).(float64)
	require.Greater(t, after, before)
	require.Contains(t, text(`ol.entries[data-key="agentkit.events"]`), "All done")
	require.Contains(t, text("#output"), "Refunded 42 euros. All done.")
	require.Contains(t, text("#input"), hostile)
	require.Equal(t, 0.0, eval(`document.querySelector("#input").children.length`))
	screenshot(t, bctx, "run.png")

	res, err := h.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "Refunded 42 euros. All done.", res.Final)
	require.Zero(t, dialogs.Load(), "a JavaScript dialog was opened")
	logf("done")
}

// screenshot writes the page to testdata/name when DURABLE_SCREENSHOTS=1.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv(EnvScreenshots) != "1" {
		return
	}
	c, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll("testdata", 0o755))
	require.NoError(t, os.WriteFile(filepath.Join("testdata", name), png, 0o644))
	t.Logf("wrote testdata/%s", name)
}

func jsString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
