package objectstore

import (
	"fmt"
	"unicode/utf8"
)

// MaxKeyLen is the longest key, in bytes (S3's limit).
const MaxKeyLen = 1024

// CheckKey returns nil if key is a valid object key (see the package
// documentation) and an error wrapping ErrInvalidKey otherwise.
func CheckKey(key string) error {
	if err := checkKey(key); err != "" {
		return fmt.Errorf("%w %q: %s", ErrInvalidKey, truncate(key), err)
	}
	return nil
}

func checkKey(key string) string {
	if len(key) == 0 {
		return "empty"
	}
	if len(key) > MaxKeyLen {
		return "longer than 1024 bytes"
	}
	if !utf8.ValidString(key) {
		return "not valid UTF-8"
	}
	start := 0
	for i := 0; i <= len(key); i++ {
		if i < len(key) {
			c := key[i]
			if c < 0x20 || c == 0x7f {
				return "control character"
			}
			if c == '\\' {
				return "backslash"
			}
			if c != '/' {
				continue
			}
		}
		switch seg := key[start:i]; seg {
		case "":
			return "empty segment"
		case ".", "..":
			return "dot segment"
		}
		start = i + 1
	}
	return ""
}

// CheckPrefix checks a List prefix: empty, or a key, or a key followed by
// '/', or any leading part of a key (a prefix may end inside a segment).
func CheckPrefix(prefix string) error {
	if len(prefix) > MaxKeyLen || !utf8.ValidString(prefix) {
		return fmt.Errorf("%w: prefix %q", ErrInvalidKey, truncate(prefix))
	}
	for i := 0; i < len(prefix); i++ {
		if c := prefix[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return fmt.Errorf("%w: prefix %q", ErrInvalidKey, truncate(prefix))
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
