package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// Every flag that takes a number of bytes (--min-free-disk, --cache-bytes,
// the --max-*-bytes limits, the proxy's --max-stored-body) takes a size:
// plain bytes, or a whole number with a unit. `--min-free-disk 32MiB` was
// refused as an "invalid integer" without saying the value is in bytes.

// sizeForms is what a size flag accepts, said when a value is refused.
const sizeForms = "a size is a number of bytes, or a whole number with a unit: KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000), e.g. 32MiB, 1GiB, 500MB, 65536"

// sizeUnits are the units of a size, longest first so that "MiB" is not
// read as "B".
var sizeUnits = []struct {
	name string
	mult uint64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

var errSizeRange = errors.New("value out of range")

// parseSize reads a size: "65536", "64KiB", "32MiB", "500MB", "1 GiB".
// Units are matched without regard to case.
func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	digits := len(t) - len(strings.TrimLeft(t, "0123456789"))
	num, unit := t[:digits], strings.TrimSpace(t[digits:])
	if num == "" {
		return 0, errors.New(sizeForms)
	}
	mult := uint64(0)
	if unit == "" {
		mult = 1
	}
	for _, u := range sizeUnits {
		if strings.EqualFold(unit, u.name) {
			mult = u.mult
			break
		}
	}
	if mult == 0 {
		return 0, errors.New(sizeForms)
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n > math.MaxUint64/mult {
		return 0, errSizeRange
	}
	return n * mult, nil
}

// formatSize writes n in the largest binary unit that divides it (the
// defaults shown by --help: 256MiB, 64KiB), else in bytes.
func formatSize(n uint64) string {
	for i := 3; i >= 0; i-- {
		u := sizeUnits[i]
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatUint(n/u.mult, 10) + u.name
		}
	}
	return strconv.FormatUint(n, 10)
}

// sizeValue is a size flag over an int, int64 or uint64 field.
type sizeValue[T int | int64 | uint64] struct{ p *T }

// sizeFlag marks a size flag for flagValueError and printFlags.
type sizeFlag interface{ isSize() }

func (sizeValue[T]) isSize() {}

func (v sizeValue[T]) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	limit := uint64(math.MaxUint64)
	switch any(*v.p).(type) {
	case int:
		limit = math.MaxInt
	case int64:
		limit = math.MaxInt64
	}
	if n > limit {
		return errSizeRange
	}
	*v.p = T(n)
	return nil
}

func (v sizeValue[T]) String() string {
	if v.p == nil || *v.p < 0 {
		return "0"
	}
	return formatSize(uint64(*v.p))
}

func (v sizeValue[T]) Get() any { return *v.p }

// sizeVar registers a size flag: def is its default, in bytes.
func sizeVar[T int | int64 | uint64](fs *flag.FlagSet, p *T, name string, def T, usage string) {
	*p = def
	fs.Var(sizeValue[T]{p}, name, usage)
}

// physicalMemory is the machine's memory in bytes (MemTotal of
// /proc/meminfo), or 0 where that cannot be read.
func physicalMemory() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			if kb, err := strconv.ParseUint(f[1], 10, 64); err == nil && kb < math.MaxUint64/1024 {
				return kb * 1024
			}
		}
	}
	return 0
}

// memoryBound says why a size flag's value cannot fit in mem bytes of
// memory, or "" if it can (or mem is unknown): a cache, a heap floor or a
// request of more than the machine holds is a typo, found at start rather
// than by the kernel's OOM killer under load.
func memoryBound(flagName string, v, mem uint64) string {
	if mem == 0 || v <= mem {
		return ""
	}
	return fmt.Sprintf("--%s %s is more than this machine's memory (%s)", flagName, formatShortest(v), formatApprox(mem))
}

// formatShortest writes n exactly in whichever unit, binary or decimal,
// writes it shortest: 1TiB, 100GB.
func formatShortest(n uint64) string {
	best := strconv.FormatUint(n, 10)
	for _, u := range sizeUnits {
		if n != 0 && n%u.mult == 0 {
			if s := strconv.FormatUint(n/u.mult, 10) + u.name; len(s) < len(best) {
				best = s
			}
		}
	}
	return best
}

// formatApprox writes n in the largest binary unit it holds at least one
// of, to one decimal: 23.4GiB.
func formatApprox(n uint64) string {
	for i := 3; i >= 1; i-- {
		u := sizeUnits[i]
		if n >= u.mult {
			return strconv.FormatFloat(float64(n)/float64(u.mult), 'f', 1, 64) + u.name
		}
	}
	return strconv.FormatUint(n, 10)
}
