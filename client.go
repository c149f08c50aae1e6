package durable

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/durable-go/durable/internal/notify"
	"github.com/durable-go/durable/internal/sysdb"
)

// ClientConfig configures a [Client]. The zero value works.
type ClientConfig struct {
	// Schema is the Postgres schema of the engines the client works with.
	// The client does not migrate it: an engine's Launch or [Migrate] does.
	// Defaults to SchemaDefault ("durable").
	Schema string

	// AppVersion is recorded with the runs Start creates: an executor
	// claims such a run only under the same Config.AppVersion, so set it
	// to the executors' version. (A queued run that never started runs on
	// any version.) Defaults to AppVersionDefault.
	AppVersion string

	// MaxPayloadBytes limits the encoded size of each input, message and
	// event value the client sends. Defaults to MaxPayloadBytesDefault.
	MaxPayloadBytes int

	// PollInterval is the safety-net period of waits (Result, GetEvent),
	// which notifications normally end. Defaults to PollIntervalDefault.
	PollInterval time.Duration

	// PollOnly turns LISTEN/NOTIFY off, as Config.PollOnly does for an
	// engine behind a pooler in transaction mode: the client sends no
	// notifications and its waits poll every PollInterval, so lower it.
	// Executors then find the client's runs by their own polling.
	// Defaults to false.
	PollOnly bool

	// Logger receives the client's logs (its notification connection's
	// trouble). Defaults to slog.Default().
	Logger *slog.Logger

	// TracerProvider receives a span per start and enqueue, whose trace
	// context is stored with the run, as an engine's are: the run's
	// executions join the caller's trace. Defaults to nil: no spans.
	TracerProvider trace.TracerProvider
}

func (c *ClientConfig) withDefaults() ClientConfig {
	var out ClientConfig
	if c != nil {
		out = *c
	}
	out.Schema = cmp.Or(out.Schema, SchemaDefault)
	out.AppVersion = cmp.Or(out.AppVersion, AppVersionDefault)
	out.MaxPayloadBytes = cmp.Or(out.MaxPayloadBytes, MaxPayloadBytesDefault)
	out.PollInterval = cmp.Or(out.PollInterval, PollIntervalDefault)
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out
}

func (c *ClientConfig) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: ClientConfig.%s %s", ErrInvalidArgument, field, fmt.Sprintf(format, args...))
	}
	if err := checkName("ClientConfig.AppVersion", c.AppVersion); err != nil {
		return err
	}
	switch {
	case !schemaNameRE.MatchString(c.Schema):
		return bad("Schema", "%q must be a plain identifier (letters, digits, _ and $, at most 63 bytes, not starting with a digit)", c.Schema)
	case c.MaxPayloadBytes < 0:
		return bad("MaxPayloadBytes", "must not be negative")
	case c.PollInterval < 0:
		return bad("PollInterval", "must not be negative")
	}
	return nil
}

// listenLinger is how long a client keeps its LISTEN connection after the
// last wait that needed it, for the next one.
const listenLinger = 2 * time.Second

// Client creates runs, sends messages and reads results and events by
// workflow name, for a process that executes no workflow: it registers no
// function and is never launched. The runs it creates are those an
// engine's StartTx and Enqueue create, rows and notifications alike, so an
// executor that registers the workflow runs them within milliseconds.
//
// A Client starts no goroutine and holds no connection of its own except
// while a Result or GetEvent waits (see [ClientConfig].PollOnly); it is
// safe for concurrent use. [ClientWorkflow] gives the typed form.
type Client struct {
	pool   *pgxpool.Pool
	cfg    ClientConfig
	q      *sysdb.Queries
	qq     *sysdb.QueueQueries
	bq     *sysdb.BatchQueries
	dq     *sysdb.DebounceQueries
	wq     *sysdb.WaitQueries
	cq     *sysdb.ClientQueries
	tr     tracer
	log    *slog.Logger
	hub    *notify.Hub[*outcome] // waits woken by notifications; never by a local finish
	listen clientListen
}

// NewClient returns a client that works through pool with the engines of
// cfg.Schema. The caller owns the pool. cfg may be nil.
func NewClient(pool *pgxpool.Pool, cfg *ClientConfig) (*Client, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: NewClient needs a *pgxpool.Pool", ErrInvalidArgument)
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	q := sysdb.New(c.Schema, !c.PollOnly)
	cl := &Client{
		pool: pool,
		cfg:  c,
		q:    q,
		qq:   sysdb.NewQueueQueries(c.Schema, q.NotifyTo),
		bq:   sysdb.NewBatchQueries(c.Schema, q.NotifyTo),
		dq:   sysdb.NewDebounceQueries(c.Schema, q.NotifyTo),
		wq:   sysdb.NewWaitQueries(c.Schema, q.NotifyTo),
		cq:   sysdb.NewClientQueries(c.Schema),
		tr:   tracer{t: newTracer(c.TracerProvider), appVersion: c.AppVersion},
		log:  c.Logger,
		hub:  notify.NewHub[*outcome](),
	}
	cl.listen.c = cl
	return cl, nil
}

// Start creates a run of the workflow registered as workflow in the
// executors, with input encoded as JSON, and returns its workflow ID. The
// run starts on an executor of the same AppVersion that registers
// workflow, woken by a notification. A run of a name no executor
// registers stays pending, listed by [Engine.ListWorkflows]. Reusing an ID
// follows [StartOpts].ID.
func (c *Client) Start(ctx context.Context, workflow string, input any, opts *StartOpts) (string, error) {
	id, err := c.submitter().start(ctx, c.pool, workflow, input, opts)
	return id, c.hint(err)
}

// StartTx is [Client.Start] inside the caller's transaction tx: the run
// exists if and only if tx commits, and executors are woken on commit.
func (c *Client) StartTx(ctx context.Context, tx pgx.Tx, workflow string, input any, opts *StartOpts) (string, error) {
	if tx == nil {
		return "", fmt.Errorf("%w: StartTx needs a transaction", ErrInvalidArgument)
	}
	id, err := c.submitter().start(ctx, tx, workflow, input, opts)
	return id, c.hint(err)
}

// Enqueue puts a run of workflow, with input encoded as JSON, on queue and
// returns its workflow ID (with DedupReturnExisting, maybe that of the run
// holding the dedup ID); it starts when the queue's limits allow, on an
// executor that works queue. The queue must exist: declared by an
// executor's RegisterQueue or by [Client.DeclareQueue], else the error
// matches [ErrQueueNotFound].
func (c *Client) Enqueue(ctx context.Context, workflow, queue string, input any, opts *EnqueueOpts) (string, error) {
	id, err := c.submitter().enqueue(ctx, c.pool, workflow, queue, input, opts, !c.cfg.PollOnly)
	return id, c.hint(err)
}

// EnqueueTx is [Client.Enqueue] inside the caller's transaction tx: the run
// is queued if and only if tx commits, and dispatchers are woken on commit.
func (c *Client) EnqueueTx(ctx context.Context, tx pgx.Tx, workflow, queue string, input any, opts *EnqueueOpts) (string, error) {
	if tx == nil {
		return "", fmt.Errorf("%w: EnqueueTx needs a transaction", ErrInvalidArgument)
	}
	id, err := c.submitter().enqueue(ctx, tx, workflow, queue, input, opts, !c.cfg.PollOnly)
	return id, c.hint(err)
}

// Send sends msg, encoded as JSON, to run id on topic, as [Send] does.
func (c *Client) Send(ctx context.Context, id, topic string, msg any, opts *SendOpts) error {
	return c.hint(send(ctx, c.q, c.wq, c.cfg.MaxPayloadBytes, c.pool, id, topic, msg, opts))
}

// SendTx is [Client.Send] inside the caller's transaction tx.
func (c *Client) SendTx(ctx context.Context, tx pgx.Tx, id, topic string, msg any, opts *SendOpts) error {
	if tx == nil {
		return fmt.Errorf("%w: SendTx needs a transaction", ErrInvalidArgument)
	}
	return c.hint(send(ctx, c.q, c.wq, c.cfg.MaxPayloadBytes, tx, id, topic, msg, opts))
}

// Result waits until run id finishes and returns its JSON output, or its
// error as recorded (errors.Is matches the recorded cause, as with
// [Handle.Result]). It is woken by a notification (unless PollOnly) and
// polls every PollInterval as a safety net; ctx bounds the wait.
func (c *Client) Result(ctx context.Context, id string) (json.RawMessage, error) {
	return clientResult[json.RawMessage](ctx, c, id)
}

// Status returns the current status of run id.
func (c *Client) Status(ctx context.Context, id string) (Status, error) {
	info, err := readRun(ctx, c.q, c.pool, id)
	if err != nil {
		return "", c.hint(err)
	}
	return info.status, nil
}

// GetEvent returns the latest JSON value of run id's event key, waiting
// up to timeout for it to be set, as [GetEvent] does: ok is false when
// the timeout passed, or the run finished, without the key set.
func (c *Client) GetEvent(ctx context.Context, id, key string, timeout time.Duration) (value json.RawMessage, ok bool, err error) {
	value, ok, err = c.watcher().event(ctx, id, key, timeout)
	if ok && value == nil {
		value = json.RawMessage("null")
	}
	return value, ok, c.hint(err)
}

// DeclareQueue creates queue name, so that runs can be enqueued on it
// before any executor that works it has launched. It never changes a
// queue that exists (its executors' declarations and [Queue.Update] do).
//
// With opts, the queue has those limits, and the first executor that
// declares it keeps them, whatever its RegisterQueue says, as it would
// keep limits changed by Queue.Update; a later deploy whose RegisterQueue
// declares other limits replaces them. With opts nil, the first
// executor's RegisterQueue sets the limits.
func (c *Client) DeclareQueue(ctx context.Context, name string, opts *QueueOpts) error {
	if err := checkName("queue name", name); err != nil {
		return err
	}
	var o QueueOpts
	declared := ""
	if opts != nil {
		o, declared = *opts, sysdb.DeclaredBySchema
	}
	if err := o.validate(name); err != nil {
		return err
	}
	_, err := c.cq.CreateQueue(ctx, c.pool, sysdb.CreateQueueParams{Name: name, Settings: o.settings(), Declared: declared})
	if err != nil {
		return c.hint(fmt.Errorf("durable: declare queue %q: %w", name, err))
	}
	return nil
}

// Close closes the client's LISTEN connection, if a wait opened it and it
// is still open: a client otherwise closes it on its own, a moment after
// the last wait. Waits in progress go on by polling. The client stays
// usable.
func (c *Client) Close() { c.listen.close() }

func (c *Client) submitter() submitter {
	return submitter{q: c.q, qq: c.qq, bq: c.bq, dq: c.dq, appVersion: c.cfg.AppVersion, limit: c.cfg.MaxPayloadBytes, tr: &c.tr}
}

func (c *Client) watcher() watcher {
	w := watcher{pool: c.pool, q: c.q, wq: c.wq, hub: c.hub, notify: !c.cfg.PollOnly,
		poll: func() time.Duration { return c.cfg.PollInterval }}
	if !c.cfg.PollOnly {
		w.listen = c.listen.hold
	}
	return w
}

// hint adds to err, when the schema's tables are missing, how to create
// them: a client never migrates.
func (c *Client) hint(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") {
		return fmt.Errorf("%w (is schema %q migrated? an engine's Launch or durable.Migrate does it)", err, c.cfg.Schema)
	}
	return err
}

// onNotify wakes the waits a notification of the schema's channel is for.
func (c *Client) onNotify(payload string) {
	if len(payload) < 2 || payload[1] != ':' {
		return
	}
	switch payload[0] {
	case 'd': // a run finished
		c.hub.Notified(payload[2:])
	case 'e': // an event was set
		c.hub.Notified(payload)
	}
}

// clientResult waits for run id's outcome and decodes it as R.
func clientResult[R any](ctx context.Context, c *Client, id string) (R, error) {
	w := c.watcher()
	o, err := w.outcome(ctx, id)
	if err == nil {
		id, o, err = chainEnd(ctx, w, id, o)
	}
	if err != nil {
		var zero R
		return zero, c.hint(err)
	}
	return decodeOutcome[R](id, o)
}

// clientListen is a client's LISTEN connection: the first wait that needs
// it opens it, and it closes listenLinger after the last one ended, so a
// client that waits for one run after another keeps one connection.
type clientListen struct {
	c       *Client
	mu      sync.Mutex
	holders int
	gen     int                // bumped by every hold: an idle timer set before it does nothing
	cancel  context.CancelFunc // nil: not listening
	done    chan struct{}      // closed when the listener has stopped
	idle    *time.Timer        // closes the connection when no wait holds it
}

// hold keeps the connection open, opening it if needed, until the
// returned release is called. A notification sent before its LISTEN is in
// place is not lost: once it is, every wait looks again (OnConnected).
func (l *clientListen) hold() (release func()) {
	l.mu.Lock()
	l.holders++
	l.gen++
	if l.idle != nil {
		l.idle.Stop()
		l.idle = nil
	}
	if l.cancel == nil {
		l.startLocked()
	}
	l.mu.Unlock()
	var once sync.Once
	return func() { once.Do(l.release) }
}

func (l *clientListen) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holders--
	if l.holders > 0 || l.cancel == nil {
		return
	}
	gen := l.gen
	l.idle = time.AfterFunc(listenLinger, func() {
		l.mu.Lock()
		if gen != l.gen || l.holders > 0 {
			l.mu.Unlock()
			return
		}
		l.stopLocked()
	})
}

func (l *clientListen) close() {
	l.mu.Lock()
	l.gen++
	l.stopLocked()
}

// stopLocked stops the listener and waits for it; it unlocks l.mu.
func (l *clientListen) stopLocked() {
	if l.idle != nil {
		l.idle.Stop()
		l.idle = nil
	}
	cancel, done := l.cancel, l.done
	l.cancel, l.done = nil, nil
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (l *clientListen) startLocked() {
	c := l.c
	nl := notify.New()
	nl.Connect = func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.ConnectConfig(ctx, c.pool.Config().ConnConfig.Copy())
	}
	nl.ListenSQL = c.q.ListenSQL()
	nl.OnNotify = c.onNotify
	nl.OnConnected = c.hub.WakeAll
	nl.Logger = c.log
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		nl.Run(ctx)
	}()
	l.cancel, l.done = cancel, done
}

// WorkflowRef is a workflow registered by the executors, as a [Client]
// sees it: typed, without its function. Make one with [ClientWorkflow].
type WorkflowRef[P, R any] struct {
	c    *Client
	name string
}

// ClientWorkflow returns the workflow registered as name in the executors,
// taking P and returning R, for c to start, enqueue and wait for. The
// types must be those of the registered function (or encode to the same
// JSON); nothing is checked until a run decodes them.
func ClientWorkflow[P, R any](c *Client, name string) *WorkflowRef[P, R] {
	return &WorkflowRef[P, R]{c: c, name: name}
}

// Name returns the workflow's registered name.
func (w *WorkflowRef[P, R]) Name() string { return w.name }

// Start is [Client.Start] of w, returning the run's typed handle.
func (w *WorkflowRef[P, R]) Start(ctx context.Context, in P, opts *StartOpts) (*ClientHandle[R], error) {
	return w.handle(w.c.Start(ctx, w.name, in, opts))
}

// StartTx is [Client.StartTx] of w.
func (w *WorkflowRef[P, R]) StartTx(ctx context.Context, tx pgx.Tx, in P, opts *StartOpts) (*ClientHandle[R], error) {
	return w.handle(w.c.StartTx(ctx, tx, w.name, in, opts))
}

// Enqueue is [Client.Enqueue] of w.
func (w *WorkflowRef[P, R]) Enqueue(ctx context.Context, queue string, in P, opts *EnqueueOpts) (*ClientHandle[R], error) {
	return w.handle(w.c.Enqueue(ctx, w.name, queue, in, opts))
}

// EnqueueTx is [Client.EnqueueTx] of w.
func (w *WorkflowRef[P, R]) EnqueueTx(ctx context.Context, tx pgx.Tx, queue string, in P, opts *EnqueueOpts) (*ClientHandle[R], error) {
	return w.handle(w.c.EnqueueTx(ctx, tx, w.name, queue, in, opts))
}

// EnqueueMany is [Workflow.EnqueueMany] for a client: the same rows in one
// statement, in a transaction of its own, all or nothing.
func (w *WorkflowRef[P, R]) EnqueueMany(ctx context.Context, queue string, items []EnqueueItem[P]) ([]*ClientHandle[R], error) {
	return w.handles(enqueueMany(ctx, w.c.submitter(), "EnqueueMany", w.c.pool, nil, w.name, queue, items, !w.c.cfg.PollOnly))
}

// EnqueueManyTx is [Workflow.EnqueueManyTx] for a client: on an error, roll
// tx back.
func (w *WorkflowRef[P, R]) EnqueueManyTx(ctx context.Context, tx pgx.Tx, queue string, items []EnqueueItem[P]) ([]*ClientHandle[R], error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: EnqueueManyTx needs a transaction", ErrInvalidArgument)
	}
	return w.handles(enqueueMany(ctx, w.c.submitter(), "EnqueueManyTx", nil, tx, w.name, queue, items, !w.c.cfg.PollOnly))
}

// StartMany is [Workflow.StartMany] for a client: the runs start on the
// executors that register w, woken by one notification.
func (w *WorkflowRef[P, R]) StartMany(ctx context.Context, items []StartItem[P]) ([]*ClientHandle[R], error) {
	return w.handles(startMany(ctx, w.c.submitter(), "StartMany", w.c.pool, nil, w.name, items))
}

// StartManyTx is [Workflow.StartManyTx] for a client: on an error, roll tx
// back.
func (w *WorkflowRef[P, R]) StartManyTx(ctx context.Context, tx pgx.Tx, items []StartItem[P]) ([]*ClientHandle[R], error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: StartManyTx needs a transaction", ErrInvalidArgument)
	}
	return w.handles(startMany(ctx, w.c.submitter(), "StartManyTx", nil, tx, w.name, items))
}

func (w *WorkflowRef[P, R]) handles(ids []string, err error) ([]*ClientHandle[R], error) {
	if err != nil || ids == nil {
		return nil, w.c.hint(err)
	}
	hs := make([]*ClientHandle[R], len(ids))
	for i, id := range ids {
		hs[i] = &ClientHandle[R]{c: w.c, id: id}
	}
	return hs, nil
}

// Handle returns the handle of run id of w. It fails with
// [ErrWorkflowNotFound] or a [*ConflictError] when id is not a run of w.
func (w *WorkflowRef[P, R]) Handle(ctx context.Context, id string) (*ClientHandle[R], error) {
	if err := checkExisting(ctx, w.c.q, w.c.pool, id, w.name, nil, ""); err != nil {
		return nil, w.c.hint(err)
	}
	return &ClientHandle[R]{c: w.c, id: id}, nil
}

func (w *WorkflowRef[P, R]) handle(id string, err error) (*ClientHandle[R], error) {
	if err != nil {
		return nil, err
	}
	return &ClientHandle[R]{c: w.c, id: id}, nil
}

// ClientHandle follows one run for a [Client].
type ClientHandle[R any] struct {
	c  *Client
	id string
}

// ID returns the workflow ID.
func (h *ClientHandle[R]) ID() string { return h.id }

// Status returns the run's current status.
func (h *ClientHandle[R]) Status(ctx context.Context) (Status, error) { return h.c.Status(ctx, h.id) }

// Result waits until the run finishes and returns its result decoded as R,
// or its error as recorded; see [Client.Result].
func (h *ClientHandle[R]) Result(ctx context.Context) (R, error) {
	return clientResult[R](ctx, h.c, h.id)
}
