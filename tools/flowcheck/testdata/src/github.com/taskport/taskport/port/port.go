// Package port is a stand-in for the real port package: only Flow matters.
package port

import "time"

type Flow interface {
	Now() time.Time
	Sleep(name string, d time.Duration) error
}
