package querycheck

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
	"golang.org/x/tools/go/types/typeutil"
)

// drivers are the packages whose statement parameters are checked.
var drivers = []string{"github.com/jackc/pgx/v5", "github.com/neo4j/neo4j-go-driver/v5"}

// statementParams are the names the drivers give a statement parameter:
// pgx's Exec, Query, QueryRow and Prepare (sql), Batch.Queue (query), the
// Neo4j sessions' and transactions' Run (cypher) and neo4j.ExecuteQuery
// (query).
var statementParams = map[string]bool{"sql": true, "query": true, "cypher": true}

// allowed lists the functions that may put an identifier into a statement,
// quoted by pgx.Identifier.Sanitize (identifiers cannot be parameters),
// each with why the name is not the input's. Nothing else that is not
// built from constants is accepted anywhere. An entry that no longer
// matches anything fails the test, so the list stays exact.
var allowed = map[string]string{
	"internal/store/postgres/migrate.go: (*Store).migrate": "CREATE SCHEMA of --postgres-schema, which Open accepts only as [a-z_][a-z0-9_]{0,62}",
	"internal/bench/bench.go: (*bench).cleanup":            "DROP SCHEMA of the benchmark's own schema, a name it made",
}

// TestStatementsAreConstants reads the non-test Go files under cmd/ and
// internal/ and fails for every statement given to pgx or the Neo4j driver
// that is not built from constants: a constant, a variable only ever given
// such values (a range over a literal list, a parameter every caller gives
// a constant, a field of such a literal), or their concatenation. This is
// what keeps hostile document keys, titles and texts out of statements.
func TestStatementsAreConstants(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
		Dir:  root,
	}
	pkgs, err := packages.Load(cfg, "./cmd/...", "./internal/...")
	if err != nil {
		t.Fatalf("load packages: %v", err)
	}
	if packages.PrintErrors(pkgs) > 0 {
		t.Fatal("the packages do not type-check")
	}
	flow := newFlow(root, pkgs)
	statements := 0
	used := map[string]bool{}
	for _, site := range flow.statements() {
		statements++
		fn := site.fn
		ok := flow.built(site.arg, func() bool {
			_, listed := allowed[fn]
			used[fn] = used[fn] || listed
			return listed
		})
		if !ok {
			t.Errorf("%s: the statement %s is built at run time in %s; pass values as parameters of a constant statement",
				site.pos, types.ExprString(site.arg.e), fn)
		}
	}
	// The scan must see the stores' statements, or it checks nothing.
	if statements < 20 {
		t.Fatalf("found %d statements in the service's code, want at least 20: is the scan still finding the driver calls?", statements)
	}
	var stale []string
	for k := range allowed {
		if !used[k] {
			stale = append(stale, k)
		}
	}
	sort.Strings(stale)
	for _, k := range stale {
		t.Errorf("allowed entry %q puts no identifier into a statement: remove it", k)
	}
}

// expr is an expression and the type information of its package.
type expr struct {
	e    ast.Expr
	info *types.Info
}

// site is a statement argument of a driver call.
type site struct {
	arg expr
	pos token.Position
	fn  string // the enclosing function, as in allowed
}

// flow indexes, over all loaded packages, what the checker needs to follow
// a value back to where it came from.
type flow struct {
	root string
	pkgs []*packages.Package
	// assigned holds every value given to a variable: its initializer,
	// assignments, and assignments to its elements.
	assigned map[*types.Var][]expr
	// ranged holds the ranged-over expression of a range loop's value
	// variable.
	ranged map[*types.Var]expr
	// param maps a function parameter to its function and position.
	param map[*types.Var]paramOf
	// calls holds the arguments of every call of a function, by position.
	calls map[*types.Func][][]expr
	// following guards against cycles (a variable given itself).
	following map[*types.Var]bool
}

type paramOf struct {
	fn    *types.Func
	index int
}

func newFlow(root string, pkgs []*packages.Package) *flow {
	f := &flow{
		root: root, pkgs: pkgs,
		assigned: map[*types.Var][]expr{}, ranged: map[*types.Var]expr{}, param: map[*types.Var]paramOf{},
		calls: map[*types.Func][][]expr{}, following: map[*types.Var]bool{},
	}
	for _, p := range pkgs {
		for _, file := range p.Syntax {
			f.index(p.TypesInfo, file)
		}
	}
	return f
}

func (f *flow) index(info *types.Info, file *ast.File) {
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			fn, _ := info.Defs[n.Name].(*types.Func)
			i := 0
			for _, field := range n.Type.Params.List {
				for _, name := range field.Names {
					if v, ok := info.Defs[name].(*types.Var); ok && fn != nil {
						f.param[v] = paramOf{fn, i}
					}
					i++
				}
			}
		case *ast.ValueSpec:
			for i, name := range n.Names {
				if v, ok := info.Defs[name].(*types.Var); ok && i < len(n.Values) && len(n.Values) == len(n.Names) {
					f.assigned[v] = append(f.assigned[v], expr{n.Values[i], info})
				}
			}
		case *ast.AssignStmt:
			for i, lhs := range n.Lhs {
				v := target(info, lhs)
				if v == nil {
					continue
				}
				if len(n.Lhs) != len(n.Rhs) {
					// A multi-value call: nothing to follow.
					f.assigned[v] = append(f.assigned[v], expr{n.Rhs[0], info})
					continue
				}
				f.assigned[v] = append(f.assigned[v], expr{n.Rhs[i], info})
			}
		case *ast.RangeStmt:
			if n.Value != nil {
				if v := target(info, n.Value); v != nil {
					f.ranged[v] = expr{n.X, info}
				}
			}
		case *ast.CallExpr:
			if fn, ok := typeutil.Callee(info, n).(*types.Func); ok {
				fn = fn.Origin()
				args := make([]expr, len(n.Args))
				for i, a := range n.Args {
					args[i] = expr{a, info}
				}
				f.calls[fn] = append(f.calls[fn], args)
			}
		}
		return true
	})
}

// target returns the variable an assignment's left side writes: x, or the
// slice, array or map x of x[i].
func target(info *types.Info, lhs ast.Expr) *types.Var {
	for {
		switch e := ast.Unparen(lhs).(type) {
		case *ast.Ident:
			if v, ok := info.Defs[e].(*types.Var); ok {
				return v
			}
			v, _ := info.Uses[e].(*types.Var)
			return v
		case *ast.IndexExpr:
			lhs = e.X
		default:
			return nil
		}
	}
}

// statements returns the statement arguments of every driver call in the
// non-test files of the loaded packages.
func (f *flow) statements() []site {
	var out []site
	for _, p := range f.pkgs {
		for _, file := range p.Syntax {
			rel, _ := filepath.Rel(f.root, p.Fset.File(file.Pos()).Name())
			ast.Inspect(file, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				fn, ok := typeutil.Callee(p.TypesInfo, call).(*types.Func)
				if !ok || fn.Pkg() == nil || !fromDriver(fn.Pkg().Path()) {
					return true
				}
				sig := fn.Type().(*types.Signature)
				for i := 0; i < sig.Params().Len() && i < len(call.Args); i++ {
					if prm := sig.Params().At(i); statementParams[prm.Name()] && isString(prm.Type()) {
						out = append(out, site{
							arg: expr{call.Args[i], p.TypesInfo},
							pos: p.Fset.Position(call.Args[i].Pos()),
							fn:  filepath.ToSlash(rel) + ": " + enclosing(file, call.Pos()),
						})
					}
				}
				return true
			})
		}
	}
	return out
}

// built reports whether x is built from constants. A quoted identifier
// (pgx.Identifier.Sanitize) counts only when identifier says the function
// of the statement is allowed one.
func (f *flow) built(x expr, identifier func() bool) bool {
	if tv, ok := x.info.Types[x.e]; ok && tv.Value != nil {
		return true
	}
	switch e := ast.Unparen(x.e).(type) {
	case *ast.BinaryExpr:
		return e.Op == token.ADD && f.built(expr{e.X, x.info}, identifier) && f.built(expr{e.Y, x.info}, identifier)
	case *ast.CallExpr:
		fn, ok := typeutil.Callee(x.info, e).(*types.Func)
		return ok && fn.FullName() == "(github.com/jackc/pgx/v5.Identifier).Sanitize" && identifier()
	case *ast.CompositeLit:
		for _, el := range e.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				el = kv.Value
			}
			if !f.built(expr{el, x.info}, identifier) {
				return false
			}
		}
		return true
	case *ast.IndexExpr:
		return f.built(expr{e.X, x.info}, identifier)
	case *ast.Ident:
		v, ok := x.info.Uses[e].(*types.Var)
		return ok && f.variable(v, identifier)
	case *ast.SelectorExpr:
		return f.field(x.info, e, identifier)
	}
	return false
}

// variable reports whether every value v is ever given is built from
// constants.
func (f *flow) variable(v *types.Var, identifier func() bool) bool {
	if f.following[v] {
		return true // a cycle adds no value of its own
	}
	f.following[v] = true
	defer delete(f.following, v)
	if p, ok := f.param[v]; ok {
		calls := f.calls[p.fn]
		for _, args := range calls {
			if p.index >= len(args) || !f.built(args[p.index], identifier) {
				return false
			}
		}
		// A parameter no call in the service gives a value comes from
		// elsewhere: nothing is known of it.
		return len(calls) > 0
	}
	if r, ok := f.ranged[v]; ok {
		return f.built(r, identifier)
	}
	values := f.assigned[v]
	for _, val := range values {
		if !f.built(val, identifier) {
			return false
		}
	}
	return len(values) > 0
}

// field reports whether x.name is built from constants when x is the value
// variable of a range over a literal list of struct literals (a table of
// statements): then it is if that field is in every element.
func (f *flow) field(info *types.Info, sel *ast.SelectorExpr, identifier func() bool) bool {
	id, ok := sel.X.(*ast.Ident)
	if !ok {
		return false
	}
	v, ok := info.Uses[id].(*types.Var)
	if !ok {
		return false
	}
	r, ok := f.ranged[v]
	if !ok || len(f.assigned[v]) > 0 {
		return false
	}
	list, ok := f.literal(r)
	if !ok {
		return false
	}
	for _, el := range list.e.(*ast.CompositeLit).Elts {
		lit, ok := el.(*ast.CompositeLit)
		if !ok {
			return false
		}
		val := fieldValue(list.info, lit, sel.Sel.Name)
		if val == nil || !f.built(expr{val, list.info}, identifier) {
			return false
		}
	}
	return true
}

// literal returns the composite literal x is, or the one a variable x is
// only ever given.
func (f *flow) literal(x expr) (expr, bool) {
	switch e := ast.Unparen(x.e).(type) {
	case *ast.CompositeLit:
		return expr{e, x.info}, true
	case *ast.Ident:
		v, ok := x.info.Uses[e].(*types.Var)
		if !ok || len(f.assigned[v]) != 1 {
			return expr{}, false
		}
		return f.literal(f.assigned[v][0])
	}
	return expr{}, false
}

// fieldValue returns the value of field name in a struct literal, keyed or
// positional.
func fieldValue(info *types.Info, lit *ast.CompositeLit, name string) ast.Expr {
	st, ok := info.TypeOf(lit).Underlying().(*types.Struct)
	if !ok {
		return nil
	}
	for i, el := range lit.Elts {
		if kv, ok := el.(*ast.KeyValueExpr); ok {
			if k, ok := kv.Key.(*ast.Ident); ok && k.Name == name {
				return kv.Value
			}
			continue
		}
		if i < st.NumFields() && st.Field(i).Name() == name {
			return el
		}
	}
	return nil
}

func fromDriver(path string) bool {
	for _, d := range drivers {
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

func isString(t types.Type) bool {
	b, ok := t.Underlying().(*types.Basic)
	return ok && b.Kind() == types.String
}

// enclosing names the function declaration around pos, with its receiver:
// "(*Store).Migrate" or "open".
func enclosing(file *ast.File, pos token.Pos) string {
	for _, d := range file.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || pos < fd.Pos() || pos > fd.End() {
			continue
		}
		if fd.Recv == nil || len(fd.Recv.List) == 0 {
			return fd.Name.Name
		}
		return "(" + types.ExprString(fd.Recv.List[0].Type) + ")." + fd.Name.Name
	}
	return fmt.Sprintf("package level (%s)", file.Name.Name)
}
