package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strings"
)

// readConfig sets the flags of fs that the command line did not set from
// the file at path: one NAME = VALUE per line (NAME as the flag, without
// dashes; a bool may stand alone for true), blank lines and lines starting
// with # ignored. An unknown name is an error naming it and its line.
func readConfig(fs *flag.FlagSet, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	seen := map[string]int{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, hasValue := strings.Cut(line, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		where := fmt.Sprintf("%s:%d", path, n)
		fl := fs.Lookup(name)
		switch {
		case name == "config":
			return fmt.Errorf("--config %s: a config file cannot name another one", where)
		case fl == nil:
			return fmt.Errorf("--config %s: unknown key %q (keys are tapfwd run's flag names, without dashes)", where, name)
		case seen[name] != 0:
			return fmt.Errorf("--config %s: %q given again (first on line %d)", where, name, seen[name])
		}
		seen[name] = n
		if !hasValue {
			if bf, ok := fl.Value.(interface{ IsBoolFlag() bool }); !ok || !bf.IsBoolFlag() {
				return fmt.Errorf("--config %s: %q needs a value (%s = VALUE)", where, name, name)
			}
			value = "true"
		}
		if given[name] {
			continue // the command line wins
		}
		if err := fs.Set(name, strings.Trim(value, `"`)); err != nil {
			return fmt.Errorf("--config %s: %s: %v", where, name, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	return nil
}
