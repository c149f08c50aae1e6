package durablevet

import (
	"bytes"
	"go/ast"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"
)

// index is what the analyzer learns about a package before it walks the
// workflow code: the function declarations it may follow, the local
// variables bound to a func literal, the writes of variables, the
// silenced lines and the functions that must be deterministic.
type index struct {
	pass  *analysis.Pass
	decls map[*types.Func]*ast.FuncDecl
	// lits are the local variables bound to a func literal once (f :=
	// func() {...}) and never assigned again: a call f() runs the literal.
	lits map[*types.Var]*ast.FuncLit
	// writes are the identifiers written to: the root of an assignment's
	// left side (x, x.f, x[i], *x), of x++, &x, of a method call with a
	// pointer receiver on x, of delete(x, k) and clear(x).
	writes map[*ast.Ident]bool
	// changed are the package-level variables the package writes after
	// start-up (anywhere but in init, main and test functions).
	changed map[*types.Var]bool
	// silenced are the lines a directive comment silences, per file name.
	silenced map[string]map[int]bool
	// quiet are the functions whose doc comment has the directive.
	quiet map[*ast.FuncDecl]bool
	// roots are the functions and literals whose first parameter is a
	// durable.Context, and the deterministic callbacks, with where they are.
	roots []root
}

// root is a function the analyzer starts from: a declaration or literal
// (fn), or a function of the package whose declaration is looked up (obj).
type root struct {
	fn    ast.Node // *ast.FuncDecl or *ast.FuncLit
	obj   *types.Func
	where string
}

func newIndex(pass *analysis.Pass) *index {
	ix := &index{
		pass:     pass,
		decls:    map[*types.Func]*ast.FuncDecl{},
		lits:     map[*types.Var]*ast.FuncLit{},
		writes:   map[*ast.Ident]bool{},
		changed:  map[*types.Var]bool{},
		silenced: map[string]map[int]bool{},
		quiet:    map[*ast.FuncDecl]bool{},
	}
	var litRoots []root
	// scan indexes n; quiet: n is silenced as a whole; setup: n runs at
	// start-up (a package-level initializer, whose func literals do not).
	var scan func(n ast.Node, quiet, setup bool)
	scan = func(n ast.Node, quiet, setup bool) {
		ast.Inspect(n, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncLit:
				if !quiet && firstParamIs(pass.TypesInfo.TypeOf(n), isDurableContext) {
					litRoots = append(litRoots, root{fn: n, where: "in workflow code"})
				}
				if setup {
					scan(n.Body, quiet, false)
					return false
				}
			case *ast.CompositeLit:
				ix.callbackFields(n)
			case *ast.CallExpr:
				ix.callbackArgs(n)
			}
			ix.recordWrite(n, setup)
			return true
		})
	}
	for _, f := range pass.Files {
		ix.directives(f)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				scan(d, false, true) // package-level declarations
				continue
			}
			if fd.Body == nil {
				continue
			}
			if fn, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func); ok {
				ix.decls[fn] = fd
			}
			quiet := hasDirective(fd.Doc)
			ix.quiet[fd] = quiet
			if !quiet && firstParamIs(pass.TypesInfo.TypeOf(fd.Name), isDurableContext) {
				ix.roots = append(ix.roots, root{fn: fd, where: "in workflow code"})
			}
			scan(fd.Body, quiet, isSetup(pass, fd))
		}
	}
	ix.roots = append(ix.roots, litRoots...)
	ix.bindLits()
	return ix
}

// isSetup reports whether writes in fd happen at start-up: in init, main,
// or a test, benchmark, example or fuzz function (or TestMain).
func isSetup(pass *analysis.Pass, fd *ast.FuncDecl) bool {
	if fd.Recv != nil {
		return false
	}
	name := fd.Name.Name
	if name == "init" || name == "main" {
		return true
	}
	file := pass.Fset.File(fd.Pos()).Name()
	if !strings.HasSuffix(file, "_test.go") {
		return false
	}
	for _, p := range []string{"Test", "Benchmark", "Example", "Fuzz"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// recordWrite records the identifiers n writes to.
func (ix *index) recordWrite(n ast.Node, setup bool) {
	info := ix.pass.TypesInfo
	var written []ast.Expr
	switch n := n.(type) {
	case *ast.AssignStmt:
		if n.Tok != token.DEFINE {
			written = n.Lhs
		}
	case *ast.IncDecStmt:
		written = []ast.Expr{n.X}
	case *ast.UnaryExpr:
		if n.Op == token.AND {
			written = []ast.Expr{n.X}
		}
	case *ast.RangeStmt:
		if n.Tok == token.ASSIGN {
			written = []ast.Expr{n.Key, n.Value}
		}
	case *ast.CallExpr:
		if b, ok := typeutil.Callee(info, n).(*types.Builtin); ok && (b.Name() == "delete" || b.Name() == "clear") && len(n.Args) > 0 {
			written = []ast.Expr{n.Args[0]}
		}
	case *ast.SelectorExpr:
		// x.M with M on *T and x a T: the method gets &x.
		if sel := info.Selections[n]; sel != nil && sel.Kind() == types.MethodVal {
			if _, ptrRecv := sel.Obj().(*types.Func).Signature().Recv().Type().(*types.Pointer); ptrRecv {
				if _, ptrX := types.Unalias(info.TypeOf(n.X)).(*types.Pointer); !ptrX {
					written = []ast.Expr{n.X}
				}
			}
		}
	}
	for _, e := range written {
		id := rootIdent(info, e)
		if id == nil {
			continue
		}
		ix.writes[id] = true
		if v, ok := info.Uses[id].(*types.Var); ok && !setup && isGlobal(ix.pass, v) {
			ix.changed[v] = true
		}
	}
}

// rootIdent is the variable an expression written to is part of: x for
// x, x.f.g, x[i], *x and (x); nil for anything else (a call's result).
func rootIdent(info *types.Info, e ast.Expr) *ast.Ident {
	for {
		switch x := e.(type) {
		case *ast.Ident:
			return x
		case *ast.ParenExpr:
			e = x.X
		case *ast.SelectorExpr:
			if id, ok := x.X.(*ast.Ident); ok {
				if _, pkg := info.Uses[id].(*types.PkgName); pkg {
					return x.Sel
				}
			}
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		case *ast.SliceExpr:
			e = x.X
		default:
			return nil
		}
	}
}

// isGlobal reports whether v is a package-level variable of the package.
func isGlobal(pass *analysis.Pass, v *types.Var) bool {
	return v.Pkg() == pass.Pkg && v.Parent() == pass.Pkg.Scope()
}

// bindLits fills lits: local variables defined as a func literal and
// never written again.
func (ix *index) bindLits() {
	info := ix.pass.TypesInfo
	bind := func(id *ast.Ident, e ast.Expr) {
		lit, ok := ast.Unparen(e).(*ast.FuncLit)
		if !ok {
			return
		}
		if v, ok := info.Defs[id].(*types.Var); ok && v != nil {
			ix.lits[v] = lit
		}
	}
	for _, f := range ix.pass.Files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				if n.Tok == token.DEFINE && len(n.Lhs) == len(n.Rhs) {
					for i, l := range n.Lhs {
						if id, ok := l.(*ast.Ident); ok {
							bind(id, n.Rhs[i])
						}
					}
				}
			case *ast.ValueSpec:
				if len(n.Names) == len(n.Values) {
					for i, id := range n.Names {
						bind(id, n.Values[i])
					}
				}
			}
			return true
		})
	}
	for id := range ix.writes {
		if v, ok := info.Uses[id].(*types.Var); ok {
			delete(ix.lits, v)
		}
	}
}

// callbackFields adds the functions set as durable.ScheduleOpts.InputFunc
// and agentkit.ApprovalPolicy.When, which must be deterministic.
func (ix *index) callbackFields(cl *ast.CompositeLit) {
	n, ok := types.Unalias(ix.pass.TypesInfo.TypeOf(cl)).(*types.Named)
	if !ok || n.Obj().Pkg() == nil {
		return
	}
	var field string
	switch n.Obj().Pkg().Path() + "." + n.Obj().Name() {
	case durablePath + ".ScheduleOpts":
		field = "InputFunc"
	case agentkitPath + ".ApprovalPolicy":
		field = "When"
	default:
		return
	}
	for _, e := range cl.Elts {
		if kv, ok := e.(*ast.KeyValueExpr); ok {
			if k, ok := kv.Key.(*ast.Ident); ok && k.Name == field {
				ix.callback(kv.Value, "in "+n.Obj().Name()+"."+field+" (which must be deterministic)")
			}
		}
	}
}

// callbackArgs adds the prompt function of agentkit.Schedule.
func (ix *index) callbackArgs(call *ast.CallExpr) {
	fn, ok := typeutil.Callee(ix.pass.TypesInfo, call).(*types.Func)
	if ok && isFunc(fn, agentkitPath, "Schedule") && len(call.Args) > 3 {
		ix.callback(call.Args[3], "in the prompt function of agentkit.Schedule (which must be deterministic)")
	}
}

// callback adds e, a func literal or a function of this package, as a root.
func (ix *index) callback(e ast.Expr, where string) {
	e = ast.Unparen(e)
	if lit, ok := e.(*ast.FuncLit); ok {
		ix.roots = append(ix.roots, root{fn: lit, where: where})
		return
	}
	var id *ast.Ident
	switch x := e.(type) {
	case *ast.Ident:
		id = x
	case *ast.SelectorExpr:
		id = x.Sel
	}
	if id == nil {
		return
	}
	if fn, ok := ix.pass.TypesInfo.Uses[id].(*types.Func); ok && fn.Pkg() == ix.pass.Pkg {
		// The declaration may come later in the files: looked up in run.
		ix.roots = append(ix.roots, root{obj: fn.Origin(), where: where})
	}
}

// directives records the lines silenced by a directive comment: its own
// line and, when the comment stands alone on its line, the next one.
func (ix *index) directives(f *ast.File) {
	tf := ix.pass.Fset.File(f.FileStart)
	if tf == nil {
		return
	}
	var src []byte
	if ix.pass.ReadFile != nil {
		src, _ = ix.pass.ReadFile(tf.Name())
	}
	for _, g := range f.Comments {
		for _, c := range g.List {
			if !isDirective(c.Text) {
				continue
			}
			lines := ix.silenced[tf.Name()]
			if lines == nil {
				lines = map[int]bool{}
				ix.silenced[tf.Name()] = lines
			}
			line := tf.Line(c.Pos())
			lines[line] = true
			start, at := tf.Offset(tf.LineStart(line)), tf.Offset(c.Pos())
			if src == nil || (at <= len(src) && len(bytes.TrimSpace(src[start:at])) == 0) {
				lines[line+1] = true
			}
		}
	}
}

func hasDirective(g *ast.CommentGroup) bool {
	if g == nil {
		return false
	}
	for _, c := range g.List {
		if isDirective(c.Text) {
			return true
		}
	}
	return false
}

func isDirective(text string) bool {
	rest, ok := strings.CutPrefix(text, Directive)
	return ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t')
}
