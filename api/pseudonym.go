package api

import (
	"fmt"

	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
)

// pseudonym returns how a payload's user_id is stored and counted:
// secret.Pseudonym keyed with the installation's store.SecretPseudonym
// secret, which is read (or created) once and then kept in memory. Every
// place that stores or looks up a user uses this one method.
func (s *Server) pseudonym(userID string) (string, error) {
	s.pseudoMu.Lock()
	defer s.pseudoMu.Unlock()
	if s.pseudoKey == nil {
		key, err := s.store.InstallationSecret(store.SecretPseudonym)
		if err != nil {
			return "", fmt.Errorf("reading the pseudonym key: %w", err)
		}
		s.pseudoKey = key
	}
	return secret.Pseudonym(s.pseudoKey, userID), nil
}
