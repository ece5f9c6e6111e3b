//! Turning generated tokens into text deltas: byte tokens are joined into UTF-8
//! as they complete, and text that may be the start of a stop sequence is held
//! back until it is known not to be one.

/// Incremental detokenizer and stop-sequence matcher for one answer.
pub struct TextOut {
    stops: Vec<String>,
    /// Bytes of an incomplete UTF-8 character.
    partial: Vec<u8>,
    /// Decoded text not yet released (it may begin a stop sequence).
    held: String,
    /// Everything released so far.
    pub text: String,
    /// A stop sequence was found; nothing more is released.
    pub stopped: bool,
}

impl TextOut {
    pub fn new(stops: Vec<String>) -> TextOut {
        TextOut {
            stops,
            partial: Vec::new(),
            held: String::new(),
            text: String::new(),
            stopped: false,
        }
    }

    /// Adds one token's bytes (ids above 255 arrive as their `<N>` text); returns the released delta.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        if self.stopped {
            return String::new();
        }
        self.partial.extend_from_slice(bytes);
        loop {
            match std::str::from_utf8(&self.partial) {
                Ok(s) => {
                    self.held.push_str(s);
                    self.partial.clear();
                    break;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    self.held.push_str(
                        std::str::from_utf8(&self.partial[..good]).expect("valid prefix"),
                    );
                    match e.error_len() {
                        // Incomplete at the end: wait for the next byte.
                        None => {
                            self.partial.drain(..good);
                            break;
                        }
                        Some(bad) => {
                            self.held.push(char::REPLACEMENT_CHARACTER);
                            self.partial.drain(..good + bad);
                        }
                    }
                }
            }
        }
        self.release(false)
    }

    /// Releases what is held at the end of the answer.
    pub fn finish(&mut self) -> String {
        if !self.partial.is_empty() && !self.stopped {
            self.held.push(char::REPLACEMENT_CHARACTER);
            self.partial.clear();
        }
        self.release(true)
    }

    fn release(&mut self, end: bool) -> String {
        if self.stopped {
            return String::new();
        }
        let found = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        let upto = match found {
            Some(at) => {
                self.stopped = true;
                at
            }
            None if end => self.held.len(),
            // Hold back the longest tail that is a proper prefix of some stop sequence.
            None => {
                let keep = self
                    .stops
                    .iter()
                    .flat_map(|s| {
                        s.char_indices()
                            .map(|(i, _)| i)
                            .skip(1)
                            .filter(|i| self.held.ends_with(&s[..*i]))
                    })
                    .max()
                    .unwrap_or(0);
                self.held.len() - keep
            }
        };
        let out: String = self.held[..upto].to_string();
        if self.stopped {
            self.held.clear();
        } else {
            self.held.drain(..upto);
        }
        self.text.push_str(&out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_back_stop_prefixes_and_cuts_at_the_stop() {
        let mut t = TextOut::new(vec!["END".into()]);
        assert_eq!(t.push(b"ab"), "ab");
        assert_eq!(t.push(b"E"), "");
        assert_eq!(t.push(b"x"), "Ex");
        assert_eq!(t.push(b"EN"), "");
        assert_eq!(t.push(b"D tail"), "");
        assert!(t.stopped);
        assert_eq!(t.text, "abEx");
    }

    #[test]
    fn joins_utf8_across_tokens() {
        let mut t = TextOut::new(Vec::new());
        let e = "é".as_bytes();
        assert_eq!(t.push(&e[..1]), "");
        assert_eq!(t.push(&e[1..]), "é");
        assert_eq!(t.push(&[0xff]), "\u{fffd}");
        assert_eq!(t.push(&[0xc3]), "");
        assert_eq!(t.finish(), "\u{fffd}");
    }
}
