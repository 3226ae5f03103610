//! `AUTH [default] password`.

use super::{ok, Args, CommandError, Context};
use bytes::BytesMut;

/// Replies `+OK` and marks the connection authenticated, or refuses.
pub fn run(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let (user, password) = match args.remaining() {
        1 => (bytes::Bytes::from_static(b"default"), args.next_bytes()?),
        2 => (args.next_bytes()?, args.next_bytes()?),
        _ => return Err(CommandError::WrongArity(args.command())),
    };
    authenticate(context, &user, &password, args.command())?;
    ok(out);
    Ok(())
}

/// Checks a user name and password (AUTH and HELLO … AUTH); marks the session on success.
pub fn authenticate(
    context: &mut Context<'_>,
    user: &[u8],
    password: &[u8],
    command: &'static str,
) -> Result<(), CommandError> {
    if context.node.config.password.is_none() {
        return Err(CommandError::InvalidArgument {
            command,
            message: "called without any password configured for the default user \
                      (start txcached with --password)"
                .to_owned(),
        });
    }
    if !user.eq_ignore_ascii_case(b"default") || !context.node.password_matches(password) {
        tracing::warn!(
            client = context.session.id,
            "AUTH failed: wrong user name or password"
        );
        return Err(CommandError::WrongPassword);
    }
    context.session.authenticated = true;
    Ok(())
}
