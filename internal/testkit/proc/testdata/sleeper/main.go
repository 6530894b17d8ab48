// Command sleeper prints "ready" and then blocks until killed; proc's tests
// drive it with signals.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	fmt.Println("ready")
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	<-ch
	fmt.Println("terminated")
}
