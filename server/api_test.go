package server_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestAPINamesNoInternalType: code outside this module cannot import
// internal/, so an exported signature, field, type or value that names
// an internal package cannot be spelled by an embedder, nor read in go
// doc. An alias of an internal type is refused too: its fields and
// methods are documented only in the internal package. The server's
// own types (types.go) are converted from the tables' at the boundary.
func TestAPINamesNoInternalType(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		internal := map[string]bool{}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !strings.Contains(path, "/internal/") {
				continue
			}
			local := path[strings.LastIndex(path, "/")+1:]
			if imp.Name != nil {
				local = imp.Name.Name
			}
			internal[local] = true
		}
		if len(internal) == 0 {
			continue
		}
		check := func(what string, n ast.Node) {
			if n == nil {
				return
			}
			ast.Inspect(n, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && internal[id.Name] {
					t.Errorf("%s: %s names %s.%s, which code outside the module cannot name",
						fset.Position(sel.Pos()), what, id.Name, sel.Sel.Name)
				}
				return false
			})
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
					continue
				}
				check(d.Name.Name, d.Type)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						if s.Assign.IsValid() {
							check(s.Name.Name+" (an alias)", s.Type)
							continue
						}
						checkType(s.Name.Name, s.Type, check)
					case *ast.ValueSpec:
						for i, n := range s.Names {
							if n.IsExported() {
								check(n.Name, s.Type)
								if i < len(s.Values) {
									check(n.Name+"'s value", s.Values[i])
								}
							}
						}
					}
				}
			}
		}
	}
}

// checkType checks what an exported type shows: every field of a struct
// but the unexported ones, every method of an interface.
func checkType(name string, typ ast.Expr, check func(string, ast.Node)) {
	st, ok := typ.(*ast.StructType)
	if !ok {
		check(name, typ)
		return
	}
	for _, f := range st.Fields.List {
		if len(f.Names) == 0 { // embedded: its name is its type's
			if id := embeddedName(f.Type); id == nil || id.IsExported() {
				check(name, f.Type)
			}
			continue
		}
		for _, n := range f.Names {
			if n.IsExported() {
				check(name+"."+n.Name, f.Type)
			}
		}
	}
}

func embeddedName(e ast.Expr) *ast.Ident {
	switch e := e.(type) {
	case *ast.StarExpr:
		return embeddedName(e.X)
	case *ast.SelectorExpr:
		return e.Sel
	case *ast.Ident:
		return e
	}
	return nil
}

func exportedRecv(fl *ast.FieldList) bool {
	id := embeddedName(fl.List[0].Type)
	if ix, ok := fl.List[0].Type.(*ast.IndexExpr); ok {
		id = embeddedName(ix.X)
	}
	return id != nil && id.IsExported()
}

// TestServerMethods: *Server's exported methods are an embedder's API:
// serve and stop, the views, the administrator actions, the counts of
// the metrics. What only a cluster node calls is reached through
// internal/serverhook, what only tests call through export_test.go. A
// method added here should be one an embedder needs.
func TestServerMethods(t *testing.T) {
	want := []string{
		"Close", "Counts", "ForceReleaseBy", "ForceReleaseClaimBy", "KeptSessions",
		"KickBy", "KickClaimBy", "ListenAndServe", "Lock", "LockNames", "LockPage",
		"Locks", "OldestQueued", "ProtocolCounts", "RangeCounts", "RangeKeys",
		"RangeSessionCounts", "RangeViews", "ReleaseRangesBy", "Revoke", "Serve",
		"SessionInfos", "Sessions", "Shutdown", "ShuttingDown", "Snapshot", "Watches",
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil && fd.Name.IsExported() {
				if id := embeddedName(fd.Recv.List[0].Type); id != nil && id.Name == "Server" {
					got = append(got, fd.Name.Name)
				}
			}
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("exported methods of *Server:\n got %q\nwant %q", got, want)
	}
}
