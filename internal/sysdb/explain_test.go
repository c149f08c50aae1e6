package sysdb

// planModes are the plan cache modes a plan check tries: a statement must
// read few rows under a custom plan and under the generic one.
var planModes = []string{"force_custom_plan", "force_generic_plan"}
