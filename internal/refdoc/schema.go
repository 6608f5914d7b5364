package refdoc

import (
	"encoding"
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"
)

// JSONPage renders a page on the JSON of root, a struct type of this
// module: its title and intro, then a table per object type reached from
// root (field, JSON type, description), each field's description its doc
// comment, from the type's source, with the Go names of the type's fields
// written as their JSON names.
func JSONPage(title, intro string, root reflect.Type) ([]byte, error) {
	src, err := newSources()
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n%s", title, intro)
	queue, seen := []reflect.Type{root}, map[reflect.Type]bool{root: true}
	for len(queue) > 0 {
		t := queue[0]
		queue = queue[1:]
		typeDoc, fields, err := src.docs(t)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "\n## %s\n\n", t.Name())
		if typeDoc != "" {
			b.WriteString(typeDoc + "\n\n")
		}
		b.WriteString("| field | type | description |\n|---|---|---|\n")
		for _, f := range jsonFields(t) {
			typ := jsonType(f.typ, func(s reflect.Type) {
				if !seen[s] {
					seen[s] = true
					queue = append(queue, s)
				}
			})
			desc := fields[f.goName]
			if f.omitEmpty {
				desc = strings.TrimSpace(desc + " Absent when empty.")
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", f.json, typ, cell(desc))
		}
	}
	return []byte(b.String()), nil
}

type jsonField struct {
	goName, json string
	typ          reflect.Type
	omitEmpty    bool
}

// jsonFields are the fields encoding/json writes of struct type t.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{goName: f.Name, json: name, typ: f.Type, omitEmpty: strings.Contains(","+opts+",", ",omitempty,")})
	}
	return out
}

var (
	timeType = reflect.TypeFor[time.Time]()
	textType = reflect.TypeFor[encoding.TextMarshaler]()
)

// jsonType names t's JSON, calling object for each struct type it holds.
func jsonType(t reflect.Type, object func(reflect.Type)) string {
	switch {
	case t == timeType:
		return "string (RFC 3339 time)"
	case t.Implements(textType):
		return "string"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Pointer:
		return jsonType(t.Elem(), object)
	case reflect.Slice, reflect.Array:
		return "array of " + jsonType(t.Elem(), object)
	case reflect.Map:
		return "object: " + jsonType(t.Elem(), object) + " by name"
	case reflect.Struct:
		object(t)
		return fmt.Sprintf("object ([%s](#%s))", t.Name(), strings.ToLower(t.Name()))
	}
	return t.String()
}

// sources reads the doc comments of the module's types from their source.
type sources struct {
	root, module string
	fset         *token.FileSet
	pkgs         map[string]map[string]*ast.TypeSpec // by package path, type name
}

func newSources() (*sources, error) {
	root, err := Root()
	if err != nil {
		return nil, err
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	m := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindSubmatch(mod)
	if m == nil {
		return nil, fmt.Errorf("refdoc: no module line in %s", filepath.Join(root, "go.mod"))
	}
	return &sources{root: root, module: string(m[1]), fset: token.NewFileSet(), pkgs: map[string]map[string]*ast.TypeSpec{}}, nil
}

// docs is struct type t's doc comment and its fields', by Go name. A
// field without a comment of its own right below a field with a doc
// comment (no blank line between them) shares that comment ("See
// `name`.").
func (s *sources) docs(t reflect.Type) (string, map[string]string, error) {
	spec, typeDoc, err := s.spec(t)
	if err != nil {
		return "", nil, err
	}
	st, ok := spec.Type.(*ast.StructType)
	if !ok {
		return "", nil, fmt.Errorf("refdoc: %s is not a struct type", t)
	}
	rename, jsonName := renamer(t)
	out := map[string]string{}
	shared, lastLine := "", 0
	for _, f := range st.Fields.List {
		if len(f.Names) == 0 {
			continue // embedded: none in these types
		}
		first := f.Names[0].Name
		text := strings.TrimSpace(f.Doc.Text() + " " + f.Comment.Text())
		line := s.fset.Position(f.Pos()).Line
		if f.Doc != nil {
			line = s.fset.Position(f.Doc.Pos()).Line
		}
		switch {
		case text != "":
			text = oneLine(text)
			if rest, ok := strings.CutPrefix(text, first+" "); ok {
				text = "`" + jsonName(first) + "` " + rest // an acronym's own
			}
			text = rename(text)
			shared = ""
			if f.Doc != nil {
				shared = "See `" + jsonName(first) + "`."
			}
		case line == lastLine+1:
			text = shared
		default:
			shared = ""
		}
		lastLine = s.fset.Position(f.End()).Line
		for i, n := range f.Names {
			out[n.Name] = text
			if i > 0 {
				out[n.Name] = "See `" + jsonName(first) + "`."
			}
		}
	}
	return rename(oneLine(typeDoc)), out, nil
}

// spec finds t's declaration in its package's source (its tests' for
// a type declared there, as refdoc's own).
func (s *sources) spec(t reflect.Type) (*ast.TypeSpec, string, error) {
	rel, ok := strings.CutPrefix(t.PkgPath(), s.module+"/")
	if !ok {
		return nil, "", fmt.Errorf("refdoc: %s is not a type of %s", t, s.module)
	}
	types, ok := s.pkgs[t.PkgPath()]
	if !ok {
		types = map[string]*ast.TypeSpec{}
		files, err := filepath.Glob(filepath.Join(s.root, rel, "*.go"))
		if err != nil {
			return nil, "", err
		}
		// The package's own files first: a test file's type of the
		// same name (in the _test package) does not replace one.
		sort.SliceStable(files, func(i, j int) bool {
			return !strings.HasSuffix(files[i], "_test.go") && strings.HasSuffix(files[j], "_test.go")
		})
		for _, path := range files {
			f, err := parser.ParseFile(s.fset, path, nil, parser.ParseComments)
			if err != nil {
				return nil, "", err
			}
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				for _, sp := range specs(g, ok) {
					if ts, ok := sp.(*ast.TypeSpec); ok && types[ts.Name.Name] == nil {
						if ts.Doc == nil && len(g.Specs) == 1 {
							ts.Doc = g.Doc
						}
						types[ts.Name.Name] = ts
					}
				}
			}
		}
		s.pkgs[t.PkgPath()] = types
	}
	ts := types[t.Name()]
	if ts == nil {
		return nil, "", fmt.Errorf("refdoc: no declaration of %s in %s", t.Name(), rel)
	}
	return ts, ts.Doc.Text(), nil
}

func specs(g *ast.GenDecl, ok bool) []ast.Spec {
	if !ok || g.Tok != token.TYPE {
		return nil
	}
	return g.Specs
}

// oneLine is a doc comment's text as one paragraph of plain text.
func oneLine(text string) string {
	var p comment.Parser
	var pr comment.Printer
	pr.TextWidth = -1
	return strings.Join(strings.Fields(string(pr.Text(p.Parse(text)))), " ")
}

// renamer writes the Go names of t's fields as their JSON names, in
// code: those with a lower-case letter (an acronym such as TAP or NIC is
// also a word of the text), not after a dot (Config.AB is Go). jsonName
// is a field's JSON name.
func renamer(t reflect.Type) (rename, jsonName func(string) string) {
	names, all := map[string]string{}, map[string]string{}
	var alts []string
	for _, f := range jsonFields(t) {
		all[f.goName] = f.json
		if strings.ToUpper(f.goName) != f.goName {
			names[f.goName] = f.json
			alts = append(alts, regexp.QuoteMeta(f.goName))
		}
	}
	jsonName = func(goName string) string { return all[goName] }
	if len(alts) == 0 {
		return func(s string) string { return s }, jsonName
	}
	re := regexp.MustCompile(`(^|[^.\w` + "`" + `])(` + strings.Join(alts, "|") + `)\b`)
	return func(s string) string {
		return re.ReplaceAllStringFunc(s, func(m string) string {
			sub := re.FindStringSubmatch(m)
			return sub[1] + "`" + names[sub[2]] + "`"
		})
	}, jsonName
}
