package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// WriteJSON writes a report as indented JSON.
func WriteJSON(w io.Writer, report any) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(report)
}

// ReadJSON reads a report written by WriteJSON, for rendering again; its
// schema must be one of schemas.
func ReadJSON[T any](path string, schemas ...string) (*T, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h struct {
		Schema string `json:"schema"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("reading report %s: %w", path, err)
	}
	if !slices.Contains(schemas, h.Schema) {
		return nil, fmt.Errorf("reading report %s: schema %q, want %s", path, h.Schema, quoteAll(schemas))
	}
	var report T
	if err := json.Unmarshal(b, &report); err != nil {
		return nil, fmt.Errorf("reading report %s: %w", path, err)
	}
	return &report, nil
}

func quoteAll(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, " or ")
}

// WriteCSV writes a table: the head, then one record per row.
func WriteCSV(w io.Writer, head []string, rows [][]string) error {
	cw := csv.NewWriter(w)
	cw.Write(head)
	for _, r := range rows {
		cw.Write(r)
	}
	cw.Flush()
	return cw.Error()
}
