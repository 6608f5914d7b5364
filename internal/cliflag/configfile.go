package cliflag

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strings"
)

// ReadConfig sets the flags of fs that the command line did not set from
// the file at path (the flag --config names): one NAME = VALUE per line
// (NAME as the flag, without dashes; a bool may stand alone for true),
// blank lines and lines starting with # ignored. A mistake in it is a
// *UsageError naming the file, the line and the key.
func ReadConfig(fs *flag.FlagSet, path string) error {
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
		name, value = strings.TrimSpace(name), strings.Trim(strings.TrimSpace(value), `"`)
		where := fmt.Sprintf("--config %s:%d", path, n)
		fl := fs.Lookup(name)
		switch {
		case name == "config":
			return Misuse(fs, "%s: a config file cannot name another one", where)
		case fl == nil:
			return Misuse(fs, "%s: unknown key %q (keys are the flags of %s, without dashes)", where, name, fs.Name())
		case seen[name] != 0:
			return Misuse(fs, "%s: %q given again (first on line %d)", where, name, seen[name])
		case !hasValue && !isBool(fl):
			return Misuse(fs, "%s: %q needs a value (%s = VALUE)", where, name, name)
		case !hasValue:
			value = "true"
		}
		seen[name] = n
		if given[name] {
			continue // the command line wins
		}
		if err := fs.Set(name, value); err != nil {
			return Misuse(fs, "%s: %s", where, valueError(name, value, fl, err))
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	return nil
}
