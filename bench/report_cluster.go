package main

import (
	"fmt"
	"strings"
)

// clusterTable compares the three-node cluster, reached at a random node
// and at each name's owner, with the single baton server and the floor
// of the same run: each cell reads `value (cluster ÷ baton)`.
func clusterTable(b *strings.Builder, res *results) {
	cols := []string{clusterName, clusterOwnerName}
	present := false
	for _, c := range cols {
		if _, ok := res.Uncontended[c]; ok {
			present = true
		}
		if _, ok := res.Throughput[c]; ok {
			present = true
		}
	}
	if !present {
		return
	}
	b.WriteString("\n## Cluster: three baton nodes\n\n")
	b.WriteString("baton-cluster sends each acquire to a node picked at random (two in three are relayed one hop to the owner); baton-cluster-owner sends it to the owner of the name, computed from the ring. Cells read `value (cluster ÷ baton)`, baton being the single server of this run.\n\n")
	b.WriteString("| metric | TCP floor | baton | baton-cluster (random node) | baton-cluster-owner (at the owner) |\n|---|---:|---:|---:|---:|\n")
	for _, r := range res.rows() {
		bv, bok := r.value("baton")
		fmt.Fprintf(b, "| %s |", r.name)
		if fv, ok := r.value(floorName); ok && r.floor {
			fmt.Fprintf(b, " %s |", r.format(fv))
		} else {
			b.WriteString(" |")
		}
		if bok {
			fmt.Fprintf(b, " %s |", r.format(bv))
		} else {
			b.WriteString(" – |")
		}
		ratioCells(b, r, cols, bv, bok)
		b.WriteString("\n")
	}
}

// ratioCells writes row r's cells for the systems cols, each with its
// ratio to base when hasBase.
func ratioCells(b *strings.Builder, r row, cols []string, base float64, hasBase bool) {
	for _, c := range cols {
		v, ok := r.value(c)
		switch {
		case !ok:
			b.WriteString(" – |")
		case r.note != nil && r.note(c) != "":
			fmt.Fprintf(b, " %s |", r.note(c))
		default:
			cell := r.format(v)
			if hasBase {
				cell += ratio(v, base)
			}
			fmt.Fprintf(b, " %s |", cell)
		}
	}
}
