package stack

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/pflag"
)

// envInUsage finds the environment variable a flag's help names. The help
// text is the one place a setting's variable is written, so `--help`, the
// configuration reference (docs/configuration.md) and ApplyEnv cannot
// disagree; TestEveryFlagHasAnEnvironmentFallback holds every flag to it.
var envInUsage = regexp.MustCompile(`\(env ([A-Z][A-Z0-9_]*)`)

// EnvName is the environment variable that flag f falls back to, or "" when
// its help names none.
func EnvName(f *pflag.Flag) string {
	if m := envInUsage.FindStringSubmatch(f.Usage); m != nil {
		return m[1]
	}
	return ""
}

// ApplyEnv sets every flag of fs that the command line did not set from the
// environment variable its help names, when that variable is set and not
// empty (an empty one counts as unset, as in most manifests), or set at all
// for the variables of emptyIsAValue. A value that does not parse is
// refused naming the variable, as a usage error (exit 2).
func ApplyEnv(fs *pflag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		key := EnvName(f)
		if key == "" || f.Changed {
			return
		}
		v, set := os.LookupEnv(key)
		if v == "" && (!set || !emptyIsAValue[key]) {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s (for --%s): %w", key, f.Name, err))
		}
	})
	return usage(errors.Join(errs...))
}

// emptyIsAValue are the variables whose empty value is given to the flag,
// to be refused as the flag's empty value is, rather than taken for unset:
// an empty DATABASE_URL (a secret that did not resolve, a manifest's typo)
// read as unset would act on the built-in default's database.
var emptyIsAValue = map[string]bool{"DATABASE_URL": true}

// secret is a value read from the environment variable key or from the
// file its --…-file flag names, never from a flag's value, so that it
// shows neither in `ps` nor in a shell's history.
func secret(key, file string) (string, error) {
	v := os.Getenv(key)
	if file == "" {
		return v, nil
	}
	if v != "" {
		return "", fmt.Errorf("%s and its file %s are both set: keep one", key, file)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read the file of %s: %w", key, err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
