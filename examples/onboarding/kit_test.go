//go:build unix

package main

import (
	"context"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable"
	"github.com/durable-go/durable/agentkit"
	"github.com/durable-go/durable/durabletest"
)

// TestOnboardingCrashMatrix runs the onboarding workflow in one process,
// stops it after each step's effect and before its checkpoint (where the
// demo kills a worker), resumes it on a new engine, and checks that every
// effect happened once: one subscription, three emails and one chat
// message at the providers, one workspace and one audit row. The providers
// give each run new IDs, so results compare on what does not depend on
// them.
func TestOnboardingCrashMatrix(t *testing.T) {
	env := durabletest.New(t, &durabletest.Options{Config: &durable.Config{AppVersion: appVersion}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, model, svc := newTestApp(ctx, t, env)
	effects := func() map[string]int {
		out := map[string]int{}
		for _, p := range []*provider{svc.payments, svc.mail, svc.chat} {
			e, _ := p.snapshot()
			out[p.name] = len(e) // distinct idempotency keys
		}
		for _, table := range []string{"workspaces", "audit"} {
			var n int
			if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM `+a.t(table)).Scan(&n); err != nil {
				t.Error(err)
			}
			out[table] = n
		}
		return out
	}
	report := durabletest.CrashMatrix(t, env,
		func(e *durable.Engine) *durable.Workflow[Customer, Onboarded] { return register(e, a, model) }, acme,
		&durabletest.CrashOpts{
			Points:  []durabletest.Point{durabletest.BeforeCheckpoint},
			Effects: effects,
			Same: func(uninterrupted, resumed any) bool {
				u, r := uninterrupted.(Onboarded), resumed.(Onboarded)
				return u.Imported == r.Imported && u.Config == r.Config && len(u.Emails) == len(r.Emails) &&
					r.WorkspaceID != 0 && r.Subscription != "" && r.ChatMessage != "" && r.AuditID != 0
			},
		})
	var steps []string
	for _, b := range report.Boundaries {
		steps = append(steps, b.Step)
	}
	for _, want := range []string{"create-subscription", "welcome-email-billing", "post-chat-message"} {
		if !slices.Contains(steps, want) {
			t.Errorf("the matrix did not stop the run after %q; it stopped it after %v", want, steps)
		}
	}
}

// newTestApp starts the demo's fake providers and model gateway (stopped
// when the test ends), creates the app's tables in a schema of their own
// and returns the app, its model and the services.
func newTestApp(ctx context.Context, t *testing.T, env *durabletest.Env) (*app, agentkit.Model, *services) {
	t.Helper()
	appSchema := durabletest.Schema(t)
	if err := createAppTables(ctx, env.Pool, appSchema); err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	svc, err := startServices(o)
	t.Cleanup(svc.close)
	if err != nil {
		t.Fatal(err)
	}
	a := &app{pool: env.Pool, schema: pgx.Identifier{appSchema}.Sanitize(), http: &http.Client{Timeout: 30 * time.Second}, out: io.Discard,
		cfg: workerConfig{AppSchema: appSchema, StepDelay: o.StepDelay, Chunks: o.Chunks,
			PaymentsURL: svc.payments.URL + "/v1/subscriptions", MailURL: svc.mail.URL + "/v1/send", ChatURL: svc.chat.URL + "/api/chat.postMessage",
			ModelURL: svc.gateway.URL, ModelName: o.ModelName}}
	model, err := agentkit.NewOpenAI(agentkit.OpenAIConfig{BaseURL: a.cfg.ModelURL, Model: a.cfg.ModelName})
	if err != nil {
		t.Fatal(err)
	}
	return a, model, svc
}

// testOptions are the demo's options in the tests: quick steps, two
// import chunks (the workflow's shape depends on Chunks).
func testOptions() options { return options{StepDelay: time.Millisecond, Chunks: 2}.withDefaults() }
