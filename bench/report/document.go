package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/tapfwd/tapfwd/bench/stats"
)

// Document is a report laid out for reading: a title, summary lines and
// sections. The text and Markdown renderings share it.
type Document struct {
	Title    string
	Summary  []string
	Sections []Section
}

// Section is one titled table of a Document, or, without Head, a list of
// Notes; Notes after a table follow it.
type Section struct {
	Title string
	Head  []string
	Rows  [][]string
	Notes []string
}

// HostLine is the summary's first line: when and where the bench ran.
func (h Header) HostLine() string {
	s := fmt.Sprintf("%s, kernel %s (%s), %d CPUs %s, %s",
		h.Started.Format("2006-01-02 15:04 MST"), h.Host.Kernel, h.Host.Machine, h.Host.CPUs, h.Host.CPUModel, h.Host.Go)
	if h.Host.Iperf3 != "" {
		s += ", " + h.Host.Iperf3
	}
	return s
}

// VerdictRule says what a verdict takes.
func (m Method) VerdictRule() string {
	return fmt.Sprintf("A verdict needs the whole interval of the difference on one side of 0 and at least %d repetitions each.", stats.MinVerdictReps)
}

// QuickLine is the summary line of a --quick run; empty otherwise.
func (m Method) QuickLine() []string {
	if !m.Quick {
		return nil
	}
	return []string{"QUICK RUN: a smoke test of the bench, not a measurement."}
}

// ConfigTable lists the configurations with what each is, and why it was
// skipped; with how, also the tapfwd run flags and set-up commands.
func ConfigTable(cs []Config, how bool) Section {
	s := Section{Title: "Configurations", Head: []string{"config", "what"}}
	if how {
		s.Head = append(s.Head, "tapfwd run flags; set-up")
	}
	for _, c := range cs {
		what := c.Description
		if c.Skipped != "" {
			what += " -- SKIPPED: " + c.Skipped
		}
		row := []string{c.Name, what}
		if how {
			h := strings.Join(c.Args, " ")
			for _, st := range c.Setup {
				h += "; " + strings.ReplaceAll(strings.Join(st, " "), NICToken, "w1")
			}
			row = append(row, strings.TrimPrefix(h, "; "))
		}
		s.Rows = append(s.Rows, row)
	}
	return s
}

// FailedRuns is the table of the runs left out of the figures (config,
// what ran, failure); none when no run failed.
func FailedRuns(what string, rows [][]string) []Section {
	if len(rows) == 0 {
		return nil
	}
	return []Section{{Title: "Failed runs (left out of the figures)", Head: []string{"config", what, "failure"}, Rows: rows}}
}

// FailedCells is FailedRuns of the failures of cells, a row a failure:
// its cell's config and what ran (at), as cell gives them, and the
// failure.
func FailedCells[C any](what string, cells []C, cell func(C) (config, at string, failures []string)) []Section {
	var rows [][]string
	for _, c := range cells {
		config, at, failures := cell(c)
		for _, f := range failures {
			rows = append(rows, []string{config, at, f})
		}
	}
	return FailedRuns(what, rows)
}

// Documented is a report that lays itself out as a Document.
type Documented interface{ Document() Document }

// Files are r's renderings as the files of a directory, by name: the
// text (name.txt), the Markdown (name.md) and the JSON (name.json).
func Files(name string, r Documented) map[string]func(io.Writer) error {
	return map[string]func(io.Writer) error{
		name + ".txt":  func(w io.Writer) error { return r.Document().WriteText(w) },
		name + ".md":   func(w io.Writer) error { return r.Document().WriteMarkdown(w) },
		name + ".json": func(w io.Writer) error { return WriteJSON(w, r) },
	}
}

// WriteText writes d as aligned plain-text tables.
func (d Document) WriteText(w io.Writer) error {
	bw := &errWriter{w: w}
	fmt.Fprintln(bw, d.Title)
	for _, l := range d.Summary {
		fmt.Fprintln(bw, l)
	}
	for _, s := range d.Sections {
		fmt.Fprintf(bw, "\n%s\n", s.Title)
		if len(s.Head) == 0 {
			writeNotes(bw, s.Notes)
			continue
		}
		tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(s.Head, "\t"))
		for _, row := range s.Rows {
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		tw.Flush()
		writeNotes(bw, s.Notes)
	}
	return bw.err
}

// WriteMarkdown writes d as Markdown (GitHub tables).
func (d Document) WriteMarkdown(w io.Writer) error {
	bw := &errWriter{w: w}
	fmt.Fprintln(bw, "## "+d.Title)
	fmt.Fprintln(bw)
	for _, l := range d.Summary {
		fmt.Fprintf(bw, "%s  \n", l)
	}
	for _, s := range d.Sections {
		fmt.Fprintf(bw, "\n### %s\n\n", s.Title)
		if len(s.Head) == 0 {
			writeNotes(bw, s.Notes)
			continue
		}
		fmt.Fprintf(bw, "| %s |\n", strings.Join(s.Head, " | "))
		fmt.Fprintf(bw, "|%s\n", strings.Repeat("---|", len(s.Head)))
		for _, row := range s.Rows {
			cells := make([]string, len(row))
			for i, c := range row {
				cells[i] = strings.ReplaceAll(c, "|", `\|`)
			}
			fmt.Fprintf(bw, "| %s |\n", strings.Join(cells, " | "))
		}
		if len(s.Notes) > 0 {
			fmt.Fprintln(bw)
			writeNotes(bw, s.Notes)
		}
	}
	return bw.err
}

// writeNotes writes notes as a list.
func writeNotes(w io.Writer, notes []string) {
	for _, n := range notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
}

// errWriter keeps the first write error so the renderers can check once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
