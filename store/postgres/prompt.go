package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/replyd/replyd/store"
)

// scanPrompt reads one prompts row selected as prompt, version, created_ns.
func scanPrompt(r pgx.CollectableRow) (store.PromptVersion, error) {
	var p store.PromptVersion
	var created int64
	err := r.Scan(&p.Prompt, &p.Version, &created)
	p.CreatedAt = fromNS(created)
	return p, err
}

// CurrentPrompt reads the most recently saved version; see store.Store.
func (s *Store) CurrentPrompt() (store.PromptVersion, bool, error) {
	var p store.PromptVersion
	found := false
	err := s.run("read prompt", func(ctx context.Context) error {
		var created int64
		err := s.pool.QueryRow(ctx, "SELECT prompt, version, created_ns FROM prompts ORDER BY seq DESC LIMIT 1").Scan(&p.Prompt, &p.Version, &created)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		p.CreatedAt, found = fromNS(created), err == nil
		return err
	})
	return p, found, err
}

// SavePrompt appends a version, which makes it current; see store.Store.
func (s *Store) SavePrompt(p store.PromptVersion) error {
	p, err := p.Saved(s.now())
	if err != nil {
		return err
	}
	return s.run("save prompt", func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, `INSERT INTO prompts (version, prompt, created_ns) VALUES ($1, $2, $3)
			ON CONFLICT (version) DO NOTHING`, p.Version, p.Prompt, ns(p.CreatedAt))
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("store: prompt version %q: %w", p.Version, store.ErrExists)
		}
		return err
	})
}

// PromptHistory lists versions, most recently saved first; see store.Store.
func (s *Store) PromptHistory(limit int) ([]store.PromptVersion, error) {
	out := []store.PromptVersion{}
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	err := s.run("read prompt history", func(ctx context.Context) error {
		var err error
		out, err = queryAll(ctx, s.pool, scanPrompt, "SELECT prompt, version, created_ns FROM prompts ORDER BY seq DESC LIMIT $1", lim)
		return err
	})
	return out, err
}

// NextPromptVersion is one more than the largest integer version; see
// store.Store. Versions are parsed here, as the bbolt store does, so that
// both agree on what counts as an integer.
func (s *Store) NextPromptVersion() (string, error) {
	var max uint64
	err := s.run("next prompt version", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, "SELECT version FROM prompts WHERE version ~ '^[0-9]{1,19}$'")
		if err != nil {
			return err
		}
		versions, err := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, v := range versions {
			if n, perr := strconv.ParseUint(v, 10, 63); perr == nil && n > max {
				max = n
			}
		}
		return err
	})
	if err != nil {
		return "", err
	}
	return strconv.FormatUint(max+1, 10), nil
}
