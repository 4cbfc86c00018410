package miniotest

import (
	"os/exec"
	"syscall"
)

// setProcAttrs makes the kernel kill the server if the test process dies.
func setProcAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
