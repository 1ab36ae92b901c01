package api

import (
	"fmt"

	"github.com/replyd/replyd/internal/secret"
	"github.com/replyd/replyd/store"
)

// pseudonym returns the installation-wide pseudonym of a payload's user_id
// (the memory users' tag, store.MemoryUser.Tag): secret.Pseudonym keyed
// with the installation's store.SecretPseudonym secret, which is read (or
// created) once and then kept in memory.
func (s *Server) pseudonym(userID string) (string, error) {
	key, err := s.pseudonymKey()
	if err != nil {
		return "", err
	}
	return secret.Pseudonym(key, userID), nil
}

func (s *Server) pseudonymKey() ([]byte, error) {
	s.pseudoMu.Lock()
	defer s.pseudoMu.Unlock()
	if s.pseudoKey == nil {
		key, err := s.store.InstallationSecret(store.SecretPseudonym)
		if err != nil {
			return nil, fmt.Errorf("reading the pseudonym key: %w", err)
		}
		s.pseudoKey = key
	}
	return s.pseudoKey, nil
}

// userSubject returns how the user_id of a request made with key keyHash is
// stored and counted, and its tag (pseudonym). A user's memory belongs to
// the keys allowed to use it: the subject is the memory an admin linked the
// key to for this user_id (store.Store.MemorySubject), else the pseudonym
// of the user_id within the key's own namespace, so that another key naming
// the same user_id reaches another memory (none, at first) and learns
// nothing about this one. Every place that stores or looks up a user uses
// this one method.
func (s *Server) userSubject(keyHash, userID string) (subject, tag string, err error) {
	key, err := s.pseudonymKey()
	if err != nil {
		return "", "", err
	}
	uid := secret.Hash(userID)
	tag = secret.PseudonymOfHash(key, uid)
	subject, err = s.store.MemorySubject(keyHash, tag)
	if err != nil {
		return "", "", err
	}
	if subject == "" {
		subject = keyNamespaceSubject(key, keyHash, uid)
	}
	return subject, tag, nil
}

// keyNamespaceSubject is the pseudonym of a user_id (given as its
// secret.Hash) in the namespace of key keyHash. Its HMAC input ("k:" and
// two hex strings) never equals a tag's (one 64-digit hex string), so a
// namespaced subject never collides with a tag, the subject of memories
// made before memories were scoped to keys.
func keyNamespaceSubject(key []byte, keyHash, userIDHash string) string {
	return secret.PseudonymOfHash(key, "k:"+keyHash+":"+userIDHash)
}
