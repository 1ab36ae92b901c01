package api

// itemList is the {items, count} answer of the admin list endpoints (keys,
// users, prompt history).
type itemList[T any] struct {
	Items []T `json:"items"`
	Count int `json:"count"`
}

// listOf answers in as an itemList, each converted by conv: an empty list
// (never null) when in is empty.
func listOf[S, T any](in []S, conv func(S) T) itemList[T] {
	out := itemList[T]{Items: make([]T, 0, len(in))}
	for _, v := range in {
		out.Items = append(out.Items, conv(v))
	}
	out.Count = len(out.Items)
	return out
}
