package event

import (
	"strings"
	"unicode/utf8"
)

// DefaultChunkBytes is the default largest chunk the splitter produces.
const DefaultChunkBytes = 1500

// Splitter cuts a document's text into chunks by a fixed rule that depends
// only on the bytes of the text and MaxBytes: no locale, no Unicode tables
// (which change between Go versions), no randomness. The same text therefore
// gives the same chunks, and so the same chunk ids, on every machine.
//
// The rule, applied from the start of the text until nothing is left:
//
//  1. Skip ASCII whitespace (space, \t, \n, \v, \f, \r).
//  2. If what is left fits in MaxBytes, it is the last chunk.
//  3. Otherwise look at the window of the next MaxBytes bytes and cut after
//     the last paragraph break ("\n\n") in its second half; failing that after
//     the last line break; failing that after the last ". ", "! " or "? ";
//     failing that at the last space or tab; failing all, at MaxBytes, moved
//     back to the start of a UTF-8 sequence so no character is split.
//  4. Trailing ASCII whitespace is trimmed from the chunk.
type Splitter struct {
	// MaxBytes is the largest chunk in bytes; values below 16 mean 16, so a
	// window always holds a whole UTF-8 sequence.
	MaxBytes int
}

// Split cuts text into chunks by the rule of Splitter.
func (s Splitter) Split(text string) []Chunk {
	limit := s.MaxBytes
	if limit < 16 {
		limit = 16
	}
	var chunks []Chunk
	for {
		text = trimLeftSpace(text)
		if text == "" {
			return chunks
		}
		if len(text) <= limit {
			chunks = append(chunks, Chunk{Text: trimRightSpace(text)})
			return chunks
		}
		cut := cutPoint(text, limit)
		chunks = append(chunks, Chunk{Text: trimRightSpace(text[:cut])})
		text = text[cut:]
	}
}

// cutPoint returns where to end the next chunk of text, which is longer than
// limit.
func cutPoint(text string, limit int) int {
	window := text[:limit]
	half := len(window) / 2
	if i := strings.LastIndex(window, "\n\n"); i >= half {
		return i + 2
	}
	if i := strings.LastIndex(window, "\n"); i >= half {
		return i + 1
	}
	best := -1
	for _, end := range []string{". ", "! ", "? "} {
		if i := strings.LastIndex(window, end); i > best {
			best = i
		}
	}
	if best >= half {
		return best + 2
	}
	for i := len(window) - 1; i >= half; i-- {
		if window[i] == ' ' || window[i] == '\t' {
			return i + 1
		}
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	if cut == 0 {
		// Only for invalid UTF-8, which the decoder rejects before splitting;
		// cutting at the limit still guarantees progress.
		return limit
	}
	return cut
}

func isSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\v' || b == '\f' || b == '\r'
}

func trimLeftSpace(s string) string {
	for len(s) > 0 && isSpace(s[0]) {
		s = s[1:]
	}
	return s
}

func trimRightSpace(s string) string {
	for len(s) > 0 && isSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}
