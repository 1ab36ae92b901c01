// scan.h: one pass of replyd's sampler over a row of logits (scan.c).
#ifndef REPLYD_SCAN_H
#define REPLYD_SCAN_H

#include <stdint.h>

// replyd_scan finds the k largest of the n logits, sorted by decreasing
// logit (equal logits keep increasing ids), writing their ids to ids and
// values to vals, and returns how many it wrote (min(k, n)). It also writes
// log(sum(exp(logits))) to logz. n and k must be positive.
int replyd_scan(const float *logits, int n, int k, int32_t *ids, float *vals, double *logz);

#endif
