//go:build !linux

package miniotest

import "os/exec"

func setProcAttrs(cmd *exec.Cmd) {}
