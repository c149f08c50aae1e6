// Package durablevet is an analyzer (golang.org/x/tools/go/analysis) that
// finds what breaks the replay of durable workflows.
//
// Workflow code is run again from the top when a run resumes, with the
// recorded steps answered from the database, so it must take the same
// path on every execution. The analyzer reports, in workflow code but not
// in step functions:
//
//   - time: time.Now, time.Since, time.Until, time.Sleep and timers (use
//     durable.Now and durable.Sleep);
//   - random: math/rand, math/rand/v2, crypto/rand and random UUIDs (use
//     durable.NewID, or a step);
//   - io: network, file and database calls (net, net/http, os files,
//     os/exec, io/ioutil, database/sql, pgx): do them in a step;
//   - env: os.Getenv and other reads of the process's environment;
//   - goroutine: go statements (use durable.Go);
//   - channel: select statements, channel sends and receives (use
//     durable.Recv, durable.Go and Future.Wait);
//   - map-order: a range over a map whose body calls durable operations;
//   - global: writes of the package's variables, and reads of those the
//     package changes at run time.
//
// Workflow code is every function and func literal whose first parameter
// is a durable.Context (what durable.Register takes), the functions of the
// package it calls (followed transitively), the closures it runs, and the
// callbacks that must be deterministic: durable.ScheduleOpts.InputFunc,
// agentkit.ApprovalPolicy.When and the prompt function of
// agentkit.Schedule. Step code is not checked: the func literals whose
// first parameter is a context.Context, which is what durable.Step,
// durable.Go, durable.TxStep, durable.IntentStep, agentkit.StepTool and
// agentkit.TxTool run (workflow code gets a durable.Context instead). Such
// a literal is checked only when workflow code calls it directly.
//
// A comment //durable:nondeterministic-ok (with an optional reason after
// it) silences the findings on its line, or on the next line when it
// stands alone; on a call, it also stops the analyzer following the call;
// in a function's doc comment, it silences the whole function.
package durablevet

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"path/filepath"
	"reflect"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"
)

const (
	durablePath  = "github.com/durable-go/durable"
	agentkitPath = "github.com/durable-go/durable/agentkit"
)

// Directive is the comment that silences a finding on purpose.
const Directive = "//durable:nondeterministic-ok"

// Analyzer reports what breaks the replay of durable workflows.
var Analyzer = &analysis.Analyzer{
	Name: "durablevet",
	Doc: "report what breaks the replay of durable workflows\n\n" +
		"In workflow functions (first parameter durable.Context) outside step functions, durablevet reports\n" +
		"time.Now and timers, random numbers, network, file and database I/O, environment reads, goroutines,\n" +
		"channel operations, map iteration feeding durable calls, and package-level mutable state.\n" +
		"A comment " + Directive + " silences a line on purpose.",
	URL:        "https://pkg.go.dev/github.com/durable-go/durable/durablevet",
	Run:        run,
	ResultType: reflect.TypeFor[*Result](),
}

// Result is what the analyzer checked in a package.
type Result struct {
	// Workflows names the workflow functions and deterministic callbacks
	// checked: "pkg.Func", "(*pkg.T).Method", or "func literal at
	// pkg/file.go:line".
	Workflows []string
}

func run(pass *analysis.Pass) (any, error) {
	res := &Result{}
	if p := pass.Pkg.Path(); p == durablePath || p == agentkitPath {
		// The engine and the agent loop implement the durable operations:
		// they take a step's position before starting its goroutine, and
		// the like, on purpose.
		return res, nil
	}
	ix := newIndex(pass)
	w := &walker{pass: pass, ix: ix, seen: map[ast.Node]bool{}, reported: map[token.Pos]bool{}, roots: map[ast.Node]bool{}}
	for _, r := range ix.roots {
		if fd, ok := r.fn.(*ast.FuncDecl); ok {
			w.roots[fd] = true
		}
	}
	for _, r := range ix.roots {
		fn := r.fn
		if r.obj != nil {
			fd := ix.decls[r.obj]
			if fd == nil || ix.quiet[fd] {
				continue
			}
			fn = fd
		}
		if !w.seen[fn] {
			res.Workflows = append(res.Workflows, w.name(fn))
		}
		w.body(fn, r.where)
	}
	return res, nil
}

// name names a function for Result.
func (w *walker) name(fn ast.Node) string {
	if fd, ok := fn.(*ast.FuncDecl); ok {
		if obj, ok := w.pass.TypesInfo.Defs[fd.Name].(*types.Func); ok {
			return obj.FullName()
		}
	}
	p := w.pass.Fset.Position(fn.Pos())
	return fmt.Sprintf("func literal at %s/%s:%d", w.pass.Pkg.Path(), filepath.Base(p.Filename), p.Line)
}

// walker walks workflow code and reports its findings.
type walker struct {
	pass     *analysis.Pass
	ix       *index
	seen     map[ast.Node]bool // functions and literals walked
	reported map[token.Pos]bool
	roots    map[ast.Node]bool // declarations walked as roots
}

// body walks the body of fn, a *ast.FuncDecl or *ast.FuncLit, once.
func (w *walker) body(fn ast.Node, where string) {
	if w.seen[fn] {
		return
	}
	w.seen[fn] = true
	switch fn := fn.(type) {
	case *ast.FuncDecl:
		w.walk(fn.Body, where)
	case *ast.FuncLit:
		w.walk(fn.Body, where)
	}
}

func (w *walker) walk(n ast.Node, where string) {
	if n == nil {
		return
	}
	ast.Inspect(n, func(n ast.Node) bool { return w.visit(n, where) })
}

func (w *walker) visit(n ast.Node, where string) bool {
	info := w.pass.TypesInfo
	switch n := n.(type) {
	case *ast.FuncLit:
		if w.seen[n] || isStepFunc(info, n) {
			return false
		}
		// A closure in workflow code (deferred, a sort's less function,
		// called later) runs as workflow code.
		w.seen[n] = true
		return true
	case *ast.GoStmt:
		w.report(n.Pos(), ruleGoroutine, "go statement", where)
		return false
	case *ast.SelectStmt:
		w.report(n.Pos(), ruleSelect, "select", where)
		// The cases' bodies are workflow code; their channel operations
		// are the select's.
		for _, c := range n.Body.List {
			for _, s := range c.(*ast.CommClause).Body {
				w.walk(s, where)
			}
		}
		return false
	case *ast.SendStmt:
		w.report(n.Pos(), ruleChannel, "channel send", where)
	case *ast.UnaryExpr:
		if n.Op == token.ARROW {
			w.report(n.Pos(), ruleChannel, "channel receive", where)
		}
	case *ast.RangeStmt:
		w.rangeStmt(n, where)
	case *ast.CallExpr:
		return w.call(n, where)
	case *ast.SelectorExpr:
		w.use(n.Sel, n.Pos(), where)
		w.walk(n.X, where)
		return false
	case *ast.Ident:
		w.use(n, n.Pos(), where)
	}
	return true
}

// rangeStmt reports a range over a channel, and over a map when the body
// calls durable operations.
func (w *walker) rangeStmt(n *ast.RangeStmt, where string) {
	info := w.pass.TypesInfo
	t := info.TypeOf(n.X)
	if t == nil {
		return
	}
	switch t.Underlying().(type) {
	case *types.Chan:
		w.report(n.Pos(), ruleChannel, "range over a channel", where)
		return
	case *types.Map:
	default:
		if !isMapIter(info, n.X) {
			return
		}
	}
	if callsDurable(info, n.Body) {
		w.report(n.Pos(), ruleMapOrder, "range over "+types.ExprString(n.X), where)
	}
}

// call follows a call in workflow code into what it runs: a func literal
// called directly (whatever its parameters), or a function of this
// package.
func (w *walker) call(n *ast.CallExpr, where string) bool {
	if w.silenced(n.Pos()) {
		return true
	}
	callee := typeutil.Callee(w.pass.TypesInfo, n)
	switch f := ast.Unparen(n.Fun).(type) {
	case *ast.FuncLit:
		w.body(f, where)
	case *ast.Ident:
		if v, ok := callee.(*types.Var); ok && w.ix.lits[v] != nil {
			w.body(w.ix.lits[v], where)
		}
	}
	if fn, ok := callee.(*types.Func); ok && fn.Pkg() == w.pass.Pkg {
		if fd := w.ix.decls[fn.Origin()]; fd != nil && !w.ix.quiet[fd] && !w.roots[fd] {
			w.body(fd, "in "+fn.Name()+" (called from workflow code)")
		}
	}
	return true
}

// use reports a use of a forbidden function, method or variable, and of
// the package's mutable state.
func (w *walker) use(id *ast.Ident, pos token.Pos, where string) {
	obj := w.pass.TypesInfo.Uses[id]
	if obj == nil {
		return
	}
	if v, ok := obj.(*types.Var); ok && isGlobal(w.pass, v) {
		switch {
		case w.ix.writes[id]:
			w.report(pos, ruleGlobalWrite, "write of package-level variable "+v.Name(), where)
		case w.ix.changed[v] && !isDurableHandle(v.Type()):
			w.report(pos, ruleGlobalRead, "read of package-level variable "+v.Name(), where)
		}
		return
	}
	if r, name := ruleOf(obj); r != nil {
		w.report(pos, r, name, where)
	}
}

func (w *walker) report(pos token.Pos, r *rule, what, where string) {
	if w.reported[pos] || w.silenced(pos) {
		return
	}
	w.reported[pos] = true
	w.pass.Report(analysis.Diagnostic{Pos: pos, Category: r.category,
		Message: fmt.Sprintf("%s %s %s: %s", what, where, r.why, r.advice)})
}

// silenced reports whether a directive comment silences the line of pos.
func (w *walker) silenced(pos token.Pos) bool {
	p := w.pass.Fset.Position(pos)
	return w.ix.silenced[p.Filename][p.Line]
}

// isStepFunc reports whether lit is step code by its type: its first
// parameter is a context.Context. The functions durable.Step, Go, TxStep
// and IntentStep (and agentkit's StepTool and TxTool) run take one first;
// workflow code gets a durable.Context instead.
func isStepFunc(info *types.Info, lit *ast.FuncLit) bool {
	return firstParamIs(info.TypeOf(lit), isContextContext)
}

// callsDurable reports whether n (outside step code) passes a
// durable.Context to a call: a durable operation, or a workflow helper.
func callsDurable(info *types.Info, n ast.Node) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return !isStepFunc(info, n)
		case *ast.CallExpr:
			for _, a := range n.Args {
				if isDurableContext(info.TypeOf(a)) {
					found = true
				}
			}
		}
		return !found
	})
	return found
}

// isMapIter reports whether e iterates a map in its random order:
// maps.Keys(m), maps.Values(m), maps.All(m), or slices.Collect of one.
func isMapIter(info *types.Info, e ast.Expr) bool {
	call, ok := ast.Unparen(e).(*ast.CallExpr)
	if !ok {
		return false
	}
	fn, ok := typeutil.Callee(info, call).(*types.Func)
	if !ok {
		return false
	}
	switch {
	case isFunc(fn, "maps", "Keys"), isFunc(fn, "maps", "Values"), isFunc(fn, "maps", "All"):
		return true
	case isFunc(fn, "slices", "Collect") && len(call.Args) == 1:
		return isMapIter(info, call.Args[0])
	}
	return false
}

func isFunc(fn *types.Func, path, name string) bool {
	return fn.Pkg() != nil && fn.Pkg().Path() == path && fn.Name() == name && fn.Signature().Recv() == nil
}

// firstParamIs reports whether t is a function type whose first parameter
// satisfies is.
func firstParamIs(t types.Type, is func(types.Type) bool) bool {
	sig, ok := t.(*types.Signature)
	return ok && sig.Params().Len() > 0 && is(sig.Params().At(0).Type())
}

func isNamed(t types.Type, path, name string) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == path && n.Obj().Name() == name
}

func isDurableContext(t types.Type) bool { return t != nil && isNamed(t, durablePath, "Context") }
func isContextContext(t types.Type) bool { return t != nil && isNamed(t, "context", "Context") }

// isDurableHandle reports whether t is (a pointer to) a type of durable or
// agentkit, such as *durable.Workflow: set up at start-up, not state.
func isDurableHandle(t types.Type) bool {
	if p, ok := types.Unalias(t).(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	if !ok || n.Obj().Pkg() == nil {
		return false
	}
	path := n.Obj().Pkg().Path()
	return path == durablePath || path == agentkitPath
}
