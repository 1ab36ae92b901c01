//go:build !amd64

package blascore

// CPU returns no x86 features: OpenBLAS's choice is kept on other
// architectures (arm64's dynamic OpenBLAS knows its cores by part number).
func CPU() Features { return Features{} }
