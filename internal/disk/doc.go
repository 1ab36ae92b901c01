// Package disk answers how much room a file system has left, for the
// health report, the start's low-space warning and the model uploads' space
// check alike.
package disk
