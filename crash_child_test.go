package durable_test

import "os"

func runChildIfAsked() bool { return os.Getenv("DURABLE_CHILD") != "" && false }
