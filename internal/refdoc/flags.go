package refdoc

import (
	"fmt"
	"strings"

	"github.com/tapfwd/tapfwd/internal/cliflag"
)

// FlagsPage is docs/reference/flags.md: a section per command, each
// rendered by its command's test.
var FlagsPage = Sections{
	Page: "flags.md",
	Head: `# Command-line flags

Every flag of every subcommand of ` + "`tapfwd`" + ` and ` + "`tapfwd-bench`" + `, as
their ` + "`--help`" + ` prints them, taken from the commands' flag sets by
` + "`make reference`" + `: do not edit this page, a test fails when it is not what
the code says. The flags the help hides (` + "`tapfwd run`" + `'s A/B mode, for
the bench) are left out, and so are the hidden subcommands tapfwd and
tapfwd-bench start themselves.

A flag is written ` + "`--name value`" + ` or ` + "`--name=value`" + `; a true/false flag (no
value in the table) alone (` + "`--gro`" + `) or with ` + "`=false`" + `. ` + "`tapfwd run`" + ` also reads its flags from a
file (` + "`--config`" + `; flags on the command line win). An empty default is not
shown.
`,
	Names: []string{"tapfwd", "tapfwd-bench"},
}

// FlagsSection renders prog's section of FlagsPage: a table of flags for
// each of its subcommands' flag sets, in the order given.
func FlagsSection(prog string, sets []cliflag.Made) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## %s\n", prog)
	for _, m := range sets {
		fmt.Fprintf(&b, "\n### %s %s\n\n`%s %s`\n\n", m.Prog, m.Name, m.Prog, m.Synopsis)
		flags := cliflag.HelpFlags(m.FlagSet)
		if len(flags) == 0 {
			b.WriteString("No flags.\n")
			continue
		}
		b.WriteString("| flag | value | default | description |\n|---|---|---|---|\n")
		for _, f := range flags {
			name := "`--" + f.Name + "`"
			for _, a := range f.Aliases {
				name += " (also `--" + a + "`)"
			}
			value := ""
			if f.Value != "" {
				value = "`" + f.Value + "`"
			}
			def := f.Default
			if f.Quoted {
				def = fmt.Sprintf("%q", def)
			}
			if def != "" {
				def = code(def)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, value, def, cell(f.Usage))
		}
	}
	b.WriteString("\n")
	return []byte(b.String())
}

// cell is text for a table cell: one line, its pipes and angle brackets
// escaped (a libvirt snippet is text, not HTML).
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;", "\r\n", "<br>", "\n", "<br>").Replace(strings.TrimSpace(s))
}

// code is s as inline code in a table cell.
func code(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	if strings.Contains(s, "`") {
		return "`` " + s + " ``"
	}
	return "`" + s + "`"
}

// CheckFlags asks each of prog's subcommands for its --help through run
// (the command's main, given its arguments, returning its exit status),
// which returns at its flag parse before it does anything; cliflag.Record
// hands over the flag set each made. It compares prog's section of
// FlagsPage with them, or writes it with TAPFWD_REFERENCE=update.
func CheckFlags(prog string, subcommands []string, run func(args []string) int) error {
	var sets []cliflag.Made
	for _, cmd := range subcommands {
		var made []cliflag.Made
		stop := cliflag.Record(func(m cliflag.Made) { made = append(made, m) })
		code := run(append(strings.Fields(cmd), "--help"))
		stop()
		if code != 0 || len(made) != 1 || made[0].Name != cmd {
			return fmt.Errorf("%s %s, asked for its help: exit %d, flag sets %+v; want 0 and the one of %q", prog, cmd, code, made, cmd)
		}
		sets = append(sets, made[0])
	}
	return FlagsPage.Check(prog, FlagsSection(prog, sets))
}
