// render: renders a Helm chart's templates the way Helm does, with Go's text/template and the
// sprig functions (the engine Helm itself uses) plus Helm's own include, required, toYaml and
// .Files.Get, so that the chart can be checked without Helm or a cluster.
//
//	render <chart dir> <values.json> <release name>
//
// The values are JSON (the test merges values.yaml with a case's overrides). Each rendered
// template is printed as a YAML document headed by "# Source: <chart>/templates/<file>".
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
)

// toYaml writes v as block YAML with sorted keys; strings are double-quoted (JSON quoting is
// valid YAML), so that no value is read back as another type.
func toYaml(v interface{}) string {
	var b strings.Builder
	writeYaml(&b, v, 0)
	return strings.TrimSuffix(b.String(), "\n")
}

func scalar(v interface{}) string {
	out, _ := json.Marshal(v)
	return string(out)
}

func writeYaml(b *strings.Builder, v interface{}, indent int) {
	pad := strings.Repeat(" ", indent)
	switch t := v.(type) {
	case map[string]interface{}:
		if len(t) == 0 {
			b.WriteString(pad + "{}\n")
			return
		}
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			child := t[k]
			switch c := child.(type) {
			case map[string]interface{}:
				if len(c) == 0 {
					fmt.Fprintf(b, "%s%s: {}\n", pad, k)
					continue
				}
				fmt.Fprintf(b, "%s%s:\n", pad, k)
				writeYaml(b, c, indent+2)
			case []interface{}:
				if len(c) == 0 {
					fmt.Fprintf(b, "%s%s: []\n", pad, k)
					continue
				}
				fmt.Fprintf(b, "%s%s:\n", pad, k)
				writeYaml(b, c, indent+2)
			default:
				fmt.Fprintf(b, "%s%s: %s\n", pad, k, scalar(c))
			}
		}
	case []interface{}:
		for _, item := range t {
			switch c := item.(type) {
			case map[string]interface{}, []interface{}:
				var inner strings.Builder
				writeYaml(&inner, c, indent+2)
				text := inner.String()
				// The first line goes after the dash.
				fmt.Fprintf(b, "%s- %s", pad, strings.TrimPrefix(text, strings.Repeat(" ", indent+2)))
			default:
				fmt.Fprintf(b, "%s- %s\n", pad, scalar(c))
			}
		}
	default:
		fmt.Fprintf(b, "%s%s\n", pad, scalar(t))
	}
}

type files struct{ root string }

// Get returns a chart file's contents ("" when it is missing, as Helm does).
func (f files) Get(name string) string {
	out, err := os.ReadFile(filepath.Join(f.root, name))
	if err != nil {
		return ""
	}
	return string(out)
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: render <chart dir> <values.json> <release name>")
		os.Exit(2)
	}
	chartDir, valuesFile, release := os.Args[1], os.Args[2], os.Args[3]
	raw, err := os.ReadFile(valuesFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var input map[string]interface{}
	if err := json.Unmarshal(raw, &input); err != nil {
		fmt.Fprintln(os.Stderr, "values:", err)
		os.Exit(1)
	}
	root := template.New("chart")
	funcs := sprig.TxtFuncMap()
	funcs["toYaml"] = toYaml
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil || v == "" {
			return nil, fmt.Errorf("%s", msg)
		}
		return v, nil
	}
	funcs["include"] = func(name string, data interface{}) (string, error) {
		var buf bytes.Buffer
		err := root.ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
	root.Funcs(funcs).Option("missingkey=zero")
	paths, _ := filepath.Glob(filepath.Join(chartDir, "templates", "*"))
	sort.Strings(paths)
	for _, p := range paths {
		text, err := os.ReadFile(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if _, err := root.New(filepath.Base(p)).Parse(string(text)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	data := map[string]interface{}{
		"Values":  input["values"],
		"Chart":   input["chart"],
		"Release": map[string]interface{}{"Name": release, "Namespace": "default", "Service": "Helm"},
		"Files":   files{chartDir},
	}
	for _, p := range paths {
		name := filepath.Base(p)
		if strings.HasPrefix(name, "_") {
			continue
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, data); err != nil {
			fmt.Fprintln(os.Stderr, "render:", err)
			os.Exit(1)
		}
		for _, doc := range strings.Split(buf.String(), "\n---\n") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			fmt.Printf("---\n# Source: wuhu/templates/%s\n%s\n", name, strings.Trim(doc, "\n"))
		}
	}
}
