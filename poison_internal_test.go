package queuey

import (
	"strconv"
	"testing"
)

// givenBack remembers the newest givenBackCap ids, each until it is taken.
func TestGivenBackKeepsTheNewestIDsUntilTaken(t *testing.T) {
	var g givenBack
	g.add("") // no id: nothing to remember
	for i := range givenBackCap + 5 {
		g.add(strconv.Itoa(i))
	}
	g.add("7") // already there: no second entry
	if g.take("") || g.take("0") || g.take("4") {
		t.Error("took an empty id, or one of the five oldest, evicted")
	}
	if !g.take("5") || !g.take(strconv.Itoa(givenBackCap+4)) {
		t.Error("did not take the oldest or the newest id kept")
	}
	if g.take("5") {
		t.Error("took an id twice")
	}
	if len(g.ids) != givenBackCap-2 || len(g.order) != len(g.ids) {
		t.Errorf("kept %d ids in %d places, want %d in as many", len(g.ids), len(g.order), givenBackCap-2)
	}
}
