package llm

import (
	"fmt"
	"strings"

	"github.com/replyd/replyd/engine"
)

// PromptBudget is how many prompt tokens one sequence of contextPerSeq
// tokens holds while leaving room for a reply of maxReplyTokens (and the
// token that ends it). The system prompt, the profile fields and the last
// speaker message must fit in it together; older turns are dropped to make
// room. cmd renders it into the integration guide.
func PromptBudget(contextPerSeq, maxReplyTokens int) int {
	return contextPerSeq - maxReplyTokens - 1
}

// promptTooLong is the error of a request whose system prompt, profile
// fields and last speaker message alone need need tokens, more than budget.
// Its message names the fields with their sizes in tokens (count tokenizes
// one text), largest first, and never quotes them: it is shown to the
// client as 400 prompt_too_long.
func promptTooLong(req engine.GenerateRequest, need, budget int, count func(string) int) error {
	type part struct {
		name   string
		tokens int
	}
	last := ""
	for _, m := range req.Messages {
		if m.Role == engine.RoleSpeaker && strings.TrimSpace(m.Content) != "" {
			last = m.Content
		}
	}
	sp := strings.TrimSpace(req.SystemPrompt)
	if sp == "" {
		sp = defaultSystemPrompt
	}
	parts := []part{
		{"disabled_person_biography", count(req.Profile.Biography)},
		{"persona", count(req.Profile.Persona)},
		{"user_profile", count(req.Profile.UserProfile)},
		{"the last speaker message", count(last)},
		{"the system prompt (set by the administrator)", count(sp)},
	}
	// Largest first: the one to shorten leads.
	for i := 1; i < len(parts); i++ {
		for j := i; j > 0 && parts[j].tokens > parts[j-1].tokens; j-- {
			parts[j], parts[j-1] = parts[j-1], parts[j]
		}
	}
	var sizes []string
	for _, p := range parts {
		if p.tokens > 0 {
			sizes = append(sizes, fmt.Sprintf("%s %d", p.name, p.tokens))
		}
	}
	return engine.Errorf(engine.KindPromptTooLong, errPromptTooLong,
		"the prompt needs %d tokens but the language model fits %d: %s tokens; shorten them (older turns are already dropped)",
		need, budget, strings.Join(sizes, ", "))
}
