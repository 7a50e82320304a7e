package redislock

import "time"

// entryHeap is a min-heap of entries by due time, or by watch time when byWatch; each entry keeps
// its position in the heap (-1 when not in it). It is written out rather than built on
// container/heap, and keeps each entry's time beside its pointer as an offset from epoch, because a
// renewal moves its lock in both heaps: interface calls and a cache miss per comparison would cost
// more than the renewal's share of the round trip.
type entryHeap struct {
	es      []heapItem
	byWatch bool
	epoch   time.Time
}

type heapItem struct {
	at time.Duration // since the heap's epoch
	e  *keeperEntry
}

func (h *entryHeap) key(e *keeperEntry) time.Duration {
	if h.byWatch {
		return e.watchAt.Sub(h.epoch)
	}
	return e.due.Sub(h.epoch)
}

func (h *entryHeap) index(e *keeperEntry) *int {
	if h.byWatch {
		return &e.watchIndex
	}
	return &e.dueIndex
}

// top returns the earliest entry, or nil.
func (h *entryHeap) top() *keeperEntry {
	if len(h.es) == 0 {
		return nil
	}
	return h.es[0].e
}

func (h *entryHeap) place(it heapItem, i int) {
	h.es[i] = it
	*h.index(it.e) = i
}

// set puts e in the heap, or moves it to where its time now belongs.
func (h *entryHeap) set(e *keeperEntry) {
	it := heapItem{at: h.key(e), e: e}
	i := *h.index(e)
	if i < 0 {
		h.es = append(h.es, it)
		i = len(h.es) - 1
	}
	h.place(it, i)
	if !h.down(i) {
		h.up(i)
	}
}

func (h *entryHeap) remove(e *keeperEntry) {
	i := *h.index(e)
	if i < 0 {
		return
	}
	last := len(h.es) - 1
	*h.index(e) = -1
	if i != last {
		h.place(h.es[last], i)
	}
	h.es[last] = heapItem{}
	h.es = h.es[:last]
	if i != last && !h.down(i) {
		h.up(i)
	}
}

func (h *entryHeap) up(i int) {
	it := h.es[i]
	for i > 0 {
		parent := (i - 1) / 2
		if it.at >= h.es[parent].at {
			break
		}
		h.place(h.es[parent], i)
		i = parent
	}
	h.place(it, i)
}

// down sifts the item at i towards the leaves and reports whether it moved.
func (h *entryHeap) down(i int) bool {
	it, start, n := h.es[i], i, len(h.es)
	for {
		child := 2*i + 1
		if child >= n {
			break
		}
		if right := child + 1; right < n && h.es[right].at < h.es[child].at {
			child = right
		}
		if h.es[child].at >= it.at {
			break
		}
		h.place(h.es[child], i)
		i = child
	}
	h.place(it, i)
	return i > start
}
