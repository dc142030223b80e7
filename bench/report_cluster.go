package main

import (
	"fmt"
	"strings"
)

// clusterTable compares the three-node cluster, reached at a random node,
// at each name's owner and through the ring-aware client, with the single
// baton server and the floor of the same run: each cell reads `value
// (cluster ÷ baton)`. A second table does the same for version 2
// sessions, against baton-session.
func clusterTable(b *strings.Builder, res *results) {
	clusterCompare(b, res, "\n## Cluster: three baton nodes\n\n",
		"baton-cluster sends each acquire to a node picked at random (two in three are relayed one hop to the owner); baton-cluster-owner sends it to the owner of the name, computed by the harness from the ring; baton-cluster-routed is the client given the three nodes, which learns the ring and dials the owner itself. Cells read `value (cluster ÷ baton)`, baton being the single server of this run.\n\n",
		"baton", []string{clusterName, clusterOwnerName, clusterRoutedName},
		"| metric | TCP floor | baton | baton-cluster (random node) | baton-cluster-owner (at the owner) | baton-cluster-routed (ring-aware client) |\n|---|---:|---:|---:|---:|---:|\n")
	clusterCompare(b, res, "\n## Cluster: version 2 sessions on three nodes\n\n",
		"baton-cluster-session opens each worker's session on a node picked at random and sends every claim there (two in three are relayed to the owner); baton-cluster-session-routed opens it with the three nodes given: the session learns the ring and sends each claim on a session with its owner. Cells read `value (cluster ÷ baton-session)`, baton-session being the single server of this run.\n\n",
		sessionName, []string{clusterSessionName, clusterSessionRoutedName},
		"| metric | TCP floor | baton-session | baton-cluster-session (random node) | baton-cluster-session-routed (ring-aware session) |\n|---|---:|---:|---:|---:|\n")
}

// clusterCompare writes one comparison table of the systems cols with
// base, when any of cols has results.
func clusterCompare(b *strings.Builder, res *results, title, intro, base string, cols []string, header string) {
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
	b.WriteString(title)
	b.WriteString(intro)
	b.WriteString(header)
	for _, r := range res.rows() {
		bv, bok := r.value(base)
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
